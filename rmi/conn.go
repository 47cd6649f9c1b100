package rmi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/rs/zerolog"
)

// Conn is an authenticated connection to a peer. Calls go both ways: either
// side may Call objects registered on the other. It is safe for concurrent use.
type Conn struct {
	n        *Node
	nc       net.Conn
	br       *bufio.Reader
	peer     string
	role     string // peer's authenticated role (accepted connections)
	cluster  bool   // peer proved the cluster secret (accepted connections)
	named    bool   // peer proved the key bound to its name (accepted connections)
	log      zerolog.Logger
	maxFrame int
	tx, rx   *frameCipher // writer's and reader's; see seal.go

	// Outgoing frames. Calls and replies go through out (bounded: a slow
	// peer pushes back on callers). Cancels and releases go through the
	// unbounded ctrl queue so that sending them never blocks a caller that
	// is giving up.
	out    chan []byte
	kick   chan struct{}
	ctrlMu sync.Mutex
	ctrl   [][]byte

	seq atomic.Uint64 // last call id used by this side

	mu         sync.Mutex
	err        error                         // set once, on shutdown
	pending    map[uint64]chan *message      // our calls awaiting a reply
	incoming   map[uint64]context.CancelFunc // peer's calls running here
	exports    map[uint64]*service           // objects we passed by reference
	nextExport uint64

	done     chan struct{}
	ctx      context.Context // parent of every incoming call's ctx
	cancel   context.CancelFunc
	sem      chan struct{} // bounds incoming calls in flight
	loops    sync.WaitGroup
	shutOnce sync.Once
}

type (
	connKey struct{}
	peerKey struct{}
)

// ConnFrom returns the connection an incoming call arrived on, or nil when
// ctx is not a call's context. A method uses it to call back the caller or
// to watch Done().
func ConnFrom(ctx context.Context) *Conn {
	c, _ := ctx.Value(connKey{}).(*Conn)
	return c
}

// PeerFrom returns the peer Config.Identify gave the incoming call of ctx.
// ok is false when ctx is not the context of a call its node identified,
// or that peer is not a T.
func PeerFrom[T any](ctx context.Context) (peer T, ok bool) {
	peer, ok = ctx.Value(peerKey{}).(T)
	return peer, ok
}

// newConn registers an authenticated connection and starts its reader and
// writer goroutines.
func (n *Node) newConn(nc net.Conn, br *bufio.Reader, hs hsResult) (*Conn, error) {
	ctx, cancel := context.WithCancel(context.Background())
	lc := n.log.With().Str("peer", hs.peer).Str("remote", nc.RemoteAddr().String())
	if hs.role != "" {
		lc = lc.Str("role", hs.role).Bool("cluster_secret", hs.byCluster).Bool("name_proven", hs.byName)
	}
	c := &Conn{
		n:        n,
		nc:       nc,
		br:       br,
		peer:     hs.peer,
		role:     hs.role,
		cluster:  hs.byCluster,
		named:    hs.byName,
		tx:       hs.tx,
		rx:       hs.rx,
		maxFrame: n.cfg.MaxFrame,
		log:      lc.Logger(),
		out:      make(chan []byte, 256),
		kick:     make(chan struct{}, 1),
		pending:  make(map[uint64]chan *message),
		incoming: make(map[uint64]context.CancelFunc),
		exports:  make(map[uint64]*service),
		done:     make(chan struct{}),
		ctx:      ctx,
		cancel:   cancel,
		sem:      make(chan struct{}, maxInflight),
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		cancel()
		return nil, ErrClosed
	}
	n.conns[c] = struct{}{}
	c.loops.Add(2)
	n.wg.Go(func() { defer c.loops.Done(); c.readLoop() })
	n.wg.Go(func() { defer c.loops.Done(); c.writeLoop() })
	c.log.Info().Msg("rmi: connected")
	return c, nil
}

// PeerName is the name the peer announced in the (authenticated) handshake.
func (c *Conn) PeerName() string { return c.peer }

// Role is the role the peer declared in the handshake and proved with that
// role's key or the cluster secret; "" on a connection this node dialed.
func (c *Conn) Role() string { return c.role }

// ClusterSecret reports whether the peer proved the cluster secret rather
// than a role key (accepted connections only).
func (c *Conn) ClusterSecret() bool { return c.cluster }

// NameProven reports whether the peer proved the key bound to its name
// (Config.NameSecret), so its PeerName is more than a claim within its
// role (accepted connections only).
func (c *Conn) NameProven() bool { return c.named }

// RemoteAddr is the peer's network address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// LocalAddr is this side's network address.
func (c *Conn) LocalAddr() net.Addr { return c.nc.LocalAddr() }

func (c *Conn) String() string { return "rmi.Conn(" + c.peer + "@" + c.nc.RemoteAddr().String() + ")" }

// Object returns a stub for the object registered as name on the peer.
func (c *Conn) Object(name string) *Ref { return &Ref{c: c, name: name} }

// Done is closed when the connection is gone.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is nil while the connection is up, then why it closed; it always
// wraps ErrClosed.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close closes the connection, fails pending calls with ErrClosed, cancels
// the contexts of incoming calls and waits for the reader and writer. It
// does not wait for running incoming calls (so a method may close its own
// connection); Node.Close waits for those.
func (c *Conn) Close() error {
	c.shutdown(ErrClosed)
	c.loops.Wait()
	return nil
}

// shutdown tears the connection down once; later reasons are ignored.
func (c *Conn) shutdown(reason error) {
	c.shutOnce.Do(func() {
		if !errors.Is(reason, ErrClosed) {
			reason = fmt.Errorf("%w: %w", ErrClosed, reason)
		}
		c.mu.Lock()
		c.err = reason
		c.pending = nil // callers notice via done
		c.exports = nil // references die with the connection
		c.mu.Unlock()
		close(c.done)
		c.cancel()
		_ = c.nc.Close()
		c.n.mu.Lock()
		delete(c.n.conns, c)
		c.n.mu.Unlock()
		c.log.Debug().Err(reason).Msg("rmi: connection closed")
	})
}

// fail shuts down because of a read/write error and logs it at a level that
// matches how unexpected it is.
func (c *Conn) fail(err error) {
	select {
	case <-c.done: // we closed it; the error is just the fallout
		return
	default:
	}
	switch {
	case errors.Is(err, ErrProtocol), errors.Is(err, ErrFrameTooLarge):
		c.log.Error().Err(err).Msg("rmi: closing connection: bad input from peer")
	case errors.Is(err, io.EOF):
		c.log.Info().Msg("rmi: peer closed connection")
	default:
		c.log.Warn().Err(err).Msg("rmi: connection failed")
	}
	c.shutdown(err)
}

func (c *Conn) readLoop() {
	for {
		body, err := c.rx.read(c.br, c.maxFrame)
		if err != nil {
			c.fail(err)
			return
		}
		m, err := decodeMessage(body)
		if err != nil {
			c.fail(err)
			return
		}
		switch m.Kind {
		case kindCall:
			select {
			case c.sem <- struct{}{}: // back-pressure: stop reading when full
			case <-c.done:
				return
			}
			if err := c.startCall(m); err != nil {
				c.fail(err)
				return
			}
		case kindReply:
			c.deliver(m)
		case kindCancel:
			c.mu.Lock()
			if cancel := c.incoming[m.Seq]; cancel != nil {
				cancel()
			}
			c.mu.Unlock()
		case kindRelease:
			c.mu.Lock()
			delete(c.exports, m.Seq)
			c.mu.Unlock()
		}
	}
}

func (c *Conn) writeLoop() {
	bw := bufio.NewWriterSize(c.nc, 64<<10)
	for {
		var err error
		select {
		case b := <-c.out:
			err = c.tx.write(bw, b)
		case <-c.kick:
			err = c.writeCtrl(bw)
		case <-c.done:
			return
		}
		if err == nil {
			err = c.drain(bw)
		}
		if err == nil {
			err = bw.Flush()
		}
		if err != nil {
			c.fail(fmt.Errorf("rmi: write: %w", err))
			return
		}
	}
}

// drain writes everything already queued so that one flush (one syscall)
// covers a burst of concurrent calls.
func (c *Conn) drain(bw *bufio.Writer) error {
	for {
		select {
		case b := <-c.out:
			if err := c.tx.write(bw, b); err != nil {
				return err
			}
		case <-c.kick:
			if err := c.writeCtrl(bw); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

func (c *Conn) writeCtrl(bw *bufio.Writer) error {
	c.ctrlMu.Lock()
	q := c.ctrl
	c.ctrl = nil
	c.ctrlMu.Unlock()
	for _, b := range q {
		if err := c.tx.write(bw, b); err != nil {
			return err
		}
	}
	return nil
}

// sendCtrl queues a small control frame without blocking.
func (c *Conn) sendCtrl(kind uint8, seq uint64) {
	select {
	case <-c.done:
		return
	default:
	}
	body, err := encodeMessage(&message{Kind: kind, Seq: seq})
	if err != nil { // cannot happen for these plain fields
		c.log.Error().Err(err).Msg("rmi: encode control message")
		return
	}
	c.ctrlMu.Lock()
	c.ctrl = append(c.ctrl, body)
	c.ctrlMu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default: // writer already signalled; it takes the whole queue
	}
}

func (c *Conn) sendRelease(id uint64) { c.sendCtrl(kindRelease, id) }

// send queues a frame, blocking while the writer is behind.
func (c *Conn) send(ctx context.Context, body []byte) error {
	select {
	case c.out <- body:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return c.Err()
	}
}

// ---- outgoing calls ----

// Call calls method on the object registered as object on the peer. reply
// may be nil; otherwise it must be a non-nil pointer the result is decoded
// into (a **Ref receives a reference the method returned via Export).
// Top-level *Exported args are passed by reference. If ctx ends first, the
// peer is told to cancel the call and ctx's error is returned.
func (c *Conn) Call(ctx context.Context, object, method string, reply any, args ...any) error {
	if object == "" {
		return fmt.Errorf("rmi: call %s: empty object name: %w", method, ErrNoObject)
	}
	return c.call(ctx, object, 0, method, reply, args)
}

func (c *Conn) call(ctx context.Context, object string, ref uint64, method string, reply any, args []any) (err error) {
	c.n.stats.callsOut.Add(1)
	defer func() {
		if err != nil {
			c.n.stats.errorsOut.Add(1)
			target := object
			if ref != 0 {
				target = "#" + strconv.FormatUint(ref, 10)
			}
			err = fmt.Errorf("rmi: call %s.%s on %s: %w", target, method, c.peer, err)
		}
	}()
	if err := ctx.Err(); err != nil {
		return err
	}
	if reply != nil {
		if rv := reflect.ValueOf(reply); rv.Kind() != reflect.Pointer || rv.IsNil() {
			return fmt.Errorf("%w: reply must be a non-nil pointer, got %T", ErrBadArgs, reply)
		}
	}
	m := &message{Kind: kindCall, Seq: c.seq.Add(1), Object: object, Ref: ref, Method: method,
		Args: make([]codec.Raw, len(args))}
	if dl, ok := ctx.Deadline(); ok {
		// Relative, so the callee's deadline does not depend on clock sync.
		m.Timeout = max(int64(time.Until(dl)), 1)
	}
	var exported []uint64
	unexport := func() {
		c.mu.Lock()
		for _, id := range exported {
			delete(c.exports, id)
		}
		c.mu.Unlock()
	}
	for i, a := range args {
		raw, id, err := c.encodeValue(a)
		if err != nil {
			unexport()
			return fmt.Errorf("arg %d: %w", i, err)
		}
		if id != 0 {
			exported = append(exported, id)
		}
		m.Args[i] = raw
	}
	body, err := encodeMessage(m)
	if err == nil && len(body) > c.maxFrame {
		err = fmt.Errorf("%w: call is %d bytes, limit %d", ErrFrameTooLarge, len(body), c.maxFrame)
	}
	if err != nil {
		unexport()
		return err
	}

	ch := make(chan *message, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		unexport()
		return c.err
	}
	c.pending[m.Seq] = ch
	c.mu.Unlock()

	if err := c.send(ctx, body); err != nil {
		c.forget(m.Seq)
		unexport()
		return err
	}
	select {
	case r := <-ch:
		return c.finish(r, reply)
	case <-ctx.Done():
		c.forget(m.Seq)
		c.sendCtrl(kindCancel, m.Seq)
		return ctx.Err()
	case <-c.done:
		select {
		case r := <-ch: // the reply won the race with the close
			return c.finish(r, reply)
		default:
			return c.Err()
		}
	}
}

func (c *Conn) forget(seq uint64) {
	c.mu.Lock()
	delete(c.pending, seq)
	c.mu.Unlock()
}

// deliver hands a reply to its waiting caller.
func (c *Conn) deliver(m *message) {
	c.mu.Lock()
	ch := c.pending[m.Seq]
	delete(c.pending, m.Seq)
	c.mu.Unlock()
	if ch != nil {
		ch <- m // buffered, never blocks
		return
	}
	// The caller gave up (cancel raced the reply). Drop the reply, but do
	// not leak an object the peer exported for it.
	if id, ok := parseRefToken(m.Result); ok {
		c.sendRelease(id)
	}
}

func (c *Conn) finish(r *message, reply any) error {
	if r.Err != nil {
		if id, ok := parseRefToken(r.Result); ok {
			c.sendRelease(id)
		}
		return &RemoteError{Code: r.Err.Code, Message: r.Err.Message}
	}
	id, isRef := parseRefToken(r.Result)
	if reply == nil {
		if isRef {
			c.sendRelease(id)
		}
		return nil
	}
	if rp, ok := reply.(**Ref); ok {
		switch {
		case isRef:
			*rp = &Ref{c: c, id: id}
		case isNil(r.Result):
			*rp = nil
		default:
			return fmt.Errorf("%w: result is not a reference", ErrBadArgs)
		}
		return nil
	}
	if isRef {
		c.sendRelease(id)
		return fmt.Errorf("%w: result is a remote reference; reply must be **rmi.Ref, not %T", ErrBadArgs, reply)
	}
	if err := unmarshal(r.Result, reply); err != nil {
		return fmt.Errorf("%w: %w", ErrBadArgs, err)
	}
	return nil
}

// encodeValue encodes a top-level argument or result. An *Exported is put
// in the export table and sent as a reference token; its id is returned.
func (c *Conn) encodeValue(v any) (codec.Raw, uint64, error) {
	switch x := v.(type) {
	case *Exported:
		if x == nil {
			return nilRaw, 0, nil
		}
		if x.err != nil {
			return nil, 0, x.err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.exports == nil {
			return nil, 0, c.err
		}
		c.nextExport++
		c.exports[c.nextExport] = x.svc
		return refToken(c.nextExport), c.nextExport, nil
	case *Ref:
		if x == nil {
			return nilRaw, 0, nil
		}
		return nil, 0, errors.New("rmi: a *rmi.Ref cannot be passed on; pass rmi.Export(obj) instead")
	}
	b, err := marshal(v)
	return b, 0, err
}

// ---- incoming calls ----

func (c *Conn) startCall(m *message) error {
	ctx := context.WithValue(c.ctx, connKey{}, c)
	var cancel context.CancelFunc
	if m.Timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, time.Duration(m.Timeout))
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	c.mu.Lock()
	_, dup := c.incoming[m.Seq]
	if !dup {
		c.incoming[m.Seq] = cancel
	}
	c.mu.Unlock()
	if dup {
		cancel()
		<-c.sem
		return fmt.Errorf("%w: duplicate call seq %d", ErrProtocol, m.Seq)
	}
	// Started from the counted reader goroutine, so Add cannot race Wait.
	c.n.wg.Go(func() { c.serveCall(ctx, cancel, m) })
	return nil
}

func (c *Conn) serveCall(ctx context.Context, cancel context.CancelFunc, m *message) {
	defer func() {
		c.mu.Lock()
		delete(c.incoming, m.Seq)
		c.mu.Unlock()
		cancel()
		<-c.sem
	}()
	reply := &message{Kind: kindReply, Seq: m.Seq}
	c.n.stats.callsIn.Add(1)
	res, id, err := c.invoke(ctx, m)
	if err != nil {
		c.n.stats.errorsIn.Add(1)
		reply.Err = toWire(err)
	} else {
		reply.Result = res
	}
	body, err := encodeMessage(reply)
	if err == nil && len(body) > c.maxFrame {
		err = newCoded(CodeFrameTooLarge, ErrFrameTooLarge, "reply is %d bytes, limit %d", len(body), c.maxFrame)
	}
	if err != nil {
		c.log.Warn().Err(err).Str("object", m.Object).Str("method", m.Method).Msg("rmi: cannot send reply")
		if id != 0 {
			c.mu.Lock()
			delete(c.exports, id)
			c.mu.Unlock()
		}
		if !errors.Is(err, ErrFrameTooLarge) {
			err = newCoded(CodeEncode, ErrBadArgs, "encode reply: %v", err)
		}
		body, _ = encodeMessage(&message{Kind: kindReply, Seq: m.Seq, Err: toWire(err)})
	}
	_ = c.send(context.Background(), body) // fails only when the conn is gone
}

// invoke dispatches one call. Errors it makes itself carry rmi codes.
func (c *Conn) invoke(ctx context.Context, m *message) (res codec.Raw, exportID uint64, err error) {
	var svc *service
	if m.Ref != 0 {
		c.mu.Lock()
		svc = c.exports[m.Ref]
		c.mu.Unlock()
		if svc == nil {
			return nil, 0, newCoded(CodeNoObject, ErrNoObject, "no exported object #%d", m.Ref)
		}
	} else if svc = c.n.lookup(m.Object); svc == nil {
		return nil, 0, newCoded(CodeNoObject, ErrNoObject, "no object %q", m.Object)
	} else if svc.roles != nil && !slices.Contains(svc.roles, c.role) {
		c.log.Warn().Str("object", m.Object).Str("method", m.Method).Strs("allowed", svc.roles).
			Msg("rmi: call refused: the peer's role may not call this object")
		return nil, 0, newCoded(CodeForbidden, ErrForbidden, "role %q may not call %s.%s", c.role, m.Object, m.Method)
	}
	meth := svc.methods[m.Method]
	if meth == nil {
		return nil, 0, newCoded(CodeNoMethod, ErrNoMethod, "%s has no method %q", svc.typ, m.Method)
	}
	if len(m.Args) != len(meth.args) {
		return nil, 0, newCoded(CodeBadArgs, ErrBadArgs, "%s.%s takes %d args, got %d", svc.typ, m.Method, len(meth.args), len(m.Args))
	}
	in := make([]reflect.Value, 2+len(meth.args))
	in[0] = svc.rcvr
	for i, t := range meth.args {
		v, err := c.decodeArg(m.Args[i], t)
		if err != nil {
			return nil, 0, newCoded(CodeBadArgs, ErrBadArgs, "%s.%s arg %d (%s): %v", svc.typ, m.Method, i, t, err)
		}
		in[2+i] = v
	}

	defer func() {
		if r := recover(); r != nil {
			c.log.Error().Str("object", m.Object).Uint64("ref", m.Ref).Str("method", m.Method).
				Interface("panic", r).Str("stack", string(debug.Stack())).Msg("rmi: method panicked")
			res, exportID, err = nil, 0, newCoded(CodePanic, ErrPanic, "%s.%s panicked: %v", svc.typ, m.Method, r)
		}
	}()
	if id := c.n.cfg.Identify; id != nil {
		peer, err := id(c)
		if err != nil {
			c.log.Warn().Str("object", m.Object).Uint64("ref", m.Ref).Str("method", m.Method).Err(err).
				Msg("rmi: call refused: the peer was not identified")
			return nil, 0, err
		}
		ctx = context.WithValue(ctx, peerKey{}, peer)
	}
	in[1] = reflect.ValueOf(ctx)
	out := meth.fn.Call(in)
	if e := out[len(out)-1]; !e.IsNil() {
		return nil, 0, e.Interface().(error)
	}
	if !meth.hasResult {
		return nilRaw, 0, nil
	}
	res, exportID, err = c.encodeValue(out[0].Interface())
	if err != nil {
		return nil, 0, newCoded(CodeEncode, ErrBadArgs, "encode result of %s.%s: %v", svc.typ, m.Method, err)
	}
	return res, exportID, nil
}

// decodeArg decodes one argument into a fresh value of the parameter type.
func (c *Conn) decodeArg(raw codec.Raw, t reflect.Type) (reflect.Value, error) {
	id, isRef := parseRefToken(raw)
	if t == refPtrType {
		switch {
		case isRef:
			return reflect.ValueOf(&Ref{c: c, id: id}), nil
		case isNil(raw):
			return reflect.Zero(t), nil
		default:
			return reflect.Value{}, errors.New("expected a reference (rmi.Export)")
		}
	}
	if isRef {
		return reflect.Value{}, errors.New("got a reference; declare the parameter as *rmi.Ref")
	}
	if len(raw) == 0 {
		// A msgpack nil inside the args array decodes to an empty Raw: the
		// caller passed nil (a nil slice, map or pointer).
		return reflect.Zero(t), nil
	}
	p := reflect.New(t)
	if err := unmarshal(raw, p.Interface()); err != nil {
		return reflect.Value{}, err
	}
	return p.Elem(), nil
}
