package rmi

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"
)

var (
	ctxType    = reflect.TypeFor[context.Context]()
	errType    = reflect.TypeFor[error]()
	refPtrType = reflect.TypeFor[*Ref]()
)

// method is one callable method of a registered or exported object.
type method struct {
	fn        reflect.Value  // method expression: receiver is the first argument
	args      []reflect.Type // parameter types after ctx
	hasResult bool           // (R, error) rather than just error
}

// service is an object plus its eligible methods.
type service struct {
	rcvr    reflect.Value
	typ     string
	methods map[string]*method
	roles   []string // named objects: roles allowed to call (nil = any)
}

// methodCache avoids re-reflecting a type on every Export.
var methodCache sync.Map // reflect.Type -> map[string]*method

// methodsOf returns the eligible methods of t: exported, non-variadic,
// func(ctx context.Context, args...) (R, error) or (...) error.
func methodsOf(t reflect.Type) map[string]*method {
	if v, ok := methodCache.Load(t); ok {
		return v.(map[string]*method)
	}
	ms := make(map[string]*method)
	for i := range t.NumMethod() {
		m := t.Method(i)
		ft := m.Type
		if !m.IsExported() || ft.IsVariadic() || ft.NumIn() < 2 || ft.In(1) != ctxType {
			continue
		}
		switch {
		case ft.NumOut() == 1 && ft.Out(0) == errType:
		case ft.NumOut() == 2 && ft.Out(1) == errType:
		default:
			continue
		}
		args := make([]reflect.Type, ft.NumIn()-2)
		for j := range args {
			args[j] = ft.In(j + 2)
		}
		ms[m.Name] = &method{fn: m.Func, args: args, hasResult: ft.NumOut() == 2}
	}
	v, _ := methodCache.LoadOrStore(t, ms)
	return v.(map[string]*method)
}

func newService(obj any) (*service, error) {
	if obj == nil {
		return nil, errors.New("rmi: nil object")
	}
	v := reflect.ValueOf(obj)
	ms := methodsOf(v.Type())
	if len(ms) == 0 {
		return nil, fmt.Errorf("rmi: %T has no methods of the form func(context.Context, ...) (R, error) or error", obj)
	}
	return &service{rcvr: v, typ: v.Type().String(), methods: ms}, nil
}

// methodNames is for error messages and logs.
func (s *service) methodNames() []string {
	names := make([]string, 0, len(s.methods))
	for n := range s.methods {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Register exposes obj's eligible methods under name to every connection of
// the node (the paper's registerObj). Eligible methods are exported and have
// the shape func(ctx context.Context, a1 T1, ..., aN TN) (R, error) or
// func(ctx context.Context, ...) error; other methods are ignored.
func (n *Node) Register(name string, obj any) error { return n.register(name, obj, nil) }

// RegisterFor is Register for callers of the given roles only (Conn.Role):
// a call from a connection of another role gets a CodeForbidden error reply
// and is logged. RoleCluster (a peer holding the cluster secret) is always
// allowed. Objects passed by reference are not restricted: holding the
// reference is the permission.
func (n *Node) RegisterFor(name string, obj any, roles ...string) error {
	return n.register(name, obj, append([]string{RoleCluster}, roles...))
}

func (n *Node) register(name string, obj any, roles []string) error {
	if name == "" {
		return errors.New("rmi: empty object name")
	}
	svc, err := newService(obj)
	if err != nil {
		return err
	}
	svc.roles = roles
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.objects[name]; ok {
		return fmt.Errorf("rmi: object %q already registered", name)
	}
	n.objects[name] = svc
	n.log.Debug().Str("object", name).Str("type", svc.typ).Strs("methods", svc.methodNames()).Strs("roles", roles).Msg("rmi: registered")
	return nil
}

// Unregister removes a named object. Calls already running are unaffected.
func (n *Node) Unregister(name string) {
	n.mu.Lock()
	delete(n.objects, name)
	n.mu.Unlock()
}

func (n *Node) lookup(name string) *service {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.objects[name]
}

// Exported wraps a local object so that it is passed by reference: as a
// top-level call argument or as a method's result, it is registered in the
// connection's export table and the receiver gets a *Ref to it.
type Exported struct {
	svc *service
	err error
}

// Export wraps obj for passing by reference. If obj has no eligible methods
// the error surfaces when the *Exported is sent.
func Export(obj any) *Exported {
	svc, err := newService(obj)
	return &Exported{svc: svc, err: err}
}

var errNested = errors.New("rmi: *rmi.Exported and *rmi.Ref are only supported as top-level arguments and results")

// MarshalBinary makes a nested *Exported (e.g. a struct field) fail to encode
// loudly instead of silently becoming an empty value.
func (e *Exported) MarshalBinary() ([]byte, error) { return nil, errNested }

// UnmarshalBinary: see MarshalBinary.
func (e *Exported) UnmarshalBinary([]byte) error { return errNested }

// Ref is a remote reference: a stub for an object on the peer of one
// connection, either a registered name (Conn.Object) or an object the peer
// passed by reference (Export). It is safe for concurrent use and dies with
// its connection.
type Ref struct {
	c        *Conn
	name     string // registered object name, or "" for an export
	id       uint64 // export id on the peer, or 0
	released atomic.Bool
}

// Call calls method on the referenced object. reply may be nil; otherwise it
// is a pointer the result is decoded into.
func (r *Ref) Call(ctx context.Context, method string, reply any, args ...any) error {
	if r.released.Load() {
		return fmt.Errorf("rmi: call %s on released reference: %w", method, ErrNoObject)
	}
	return r.c.call(ctx, r.name, r.id, method, reply, args)
}

// Conn returns the connection the reference is bound to.
func (r *Ref) Conn() *Conn { return r.c }

// Release tells the peer to drop the exported object behind r, so it can be
// garbage collected before the connection closes. It does not wait for the
// peer. Releasing a named-object Ref (Conn.Object) or releasing twice is a
// no-op. Later calls through r fail with ErrNoObject.
func (r *Ref) Release(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.id == 0 || r.released.Swap(true) {
		return nil
	}
	r.c.sendRelease(r.id)
	return nil
}

func (r *Ref) String() string {
	if r.id != 0 {
		return fmt.Sprintf("rmi.Ref(%s#%d)", r.c.PeerName(), r.id)
	}
	return fmt.Sprintf("rmi.Ref(%s/%s)", r.c.PeerName(), r.name)
}

// MarshalBinary: see Exported.MarshalBinary.
func (r *Ref) MarshalBinary() ([]byte, error) { return nil, errNested }

// UnmarshalBinary: see Exported.MarshalBinary.
func (r *Ref) UnmarshalBinary([]byte) error { return errNested }
