package contract

import (
	"context"
	"reflect"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// recorder is a Caller and a RefCaller that keeps the last call.
type recorder struct {
	object, method string
	args           int
}

func (r *recorder) Call(ctx context.Context, object, method string, reply any, args ...any) error {
	r.object, r.method, r.args = object, method, len(args)
	return nil
}

type refRecorder struct{ r *recorder }

func (r refRecorder) Call(ctx context.Context, method string, reply any, args ...any) error {
	return r.r.Call(ctx, "", method, reply, args...)
}

// TestClientsMatchContracts: each client has every method of its
// interface with the server's parameter types (a *rmi.Exported where the
// server receives a *rmi.Ref), and calls the object and method of the same
// names with all its arguments, so a misspelt private name or a dropped
// argument fails here rather than at run time.
func TestClientsMatchContracts(t *testing.T) {
	rec := &recorder{}
	tests := []struct {
		api    reflect.Type
		client any
		object string
	}{
		{reflect.TypeFor[AppManager](), AppManagerClient{rec}, wire.ObjAppManager},
		{reflect.TypeFor[Bundles](), BundlesClient{rec}, wire.ObjBundles},
		{reflect.TypeFor[WorkerManager](), WorkerManagerClient{rec}, wire.ObjWorkerManager},
		{reflect.TypeFor[Accounts](), AccountsClient{rec}, wire.ObjAccounts},
		{reflect.TypeFor[Router](), RouterClient{rec}, wire.ObjRouter},
		{reflect.TypeFor[Cluster](), ClusterClient{rec}, wire.ObjCluster},
		{reflect.TypeFor[InstanceState](), InstanceStateClient{rec}, wire.ObjInstanceState},
		{reflect.TypeFor[JobQueue](), JobQueueClient{rec}, wire.ObjJobQueue},
		{reflect.TypeFor[WorkerApps](), WorkerAppsClient{refRecorder{rec}}, ""},
		{reflect.TypeFor[Proxy](), ProxyClient{rec}, wire.ObjProxy},
	}
	refType, exportedType := reflect.TypeFor[*rmi.Ref](), reflect.TypeFor[*rmi.Exported]()
	for _, tc := range tests {
		t.Run(tc.api.Name(), func(t *testing.T) {
			cv := reflect.ValueOf(tc.client)
			if cv.NumMethod() != tc.api.NumMethod() {
				t.Errorf("%T has %d methods, %s %d", tc.client, cv.NumMethod(), tc.api.Name(), tc.api.NumMethod())
			}
			for i := range tc.api.NumMethod() {
				want := tc.api.Method(i)
				m := cv.MethodByName(want.Name)
				if !m.IsValid() {
					t.Errorf("%T has no %s", tc.client, want.Name)
					continue
				}
				got := m.Type()
				if got.NumIn() != want.Type.NumIn() || got.NumOut() != want.Type.NumOut() {
					t.Errorf("%s: %v, want %v", want.Name, got, want.Type)
					continue
				}
				args := make([]reflect.Value, got.NumIn())
				for j := range got.NumIn() {
					g, w := got.In(j), want.Type.In(j)
					if g != w && (g != exportedType || w != refType) {
						t.Errorf("%s argument %d: %v, want %v", want.Name, j, g, w)
					}
					args[j] = reflect.Zero(g)
				}
				for j := range got.NumOut() {
					if got.Out(j) != want.Type.Out(j) {
						t.Errorf("%s result %d: %v, want %v", want.Name, j, got.Out(j), want.Type.Out(j))
					}
				}
				args[0] = reflect.ValueOf(context.Background())
				*rec = recorder{}
				m.Call(args)
				if rec.object != tc.object || rec.method != want.Name || rec.args != len(args)-1 {
					t.Errorf("%s called %s.%s with %d args, want %s.%s with %d", want.Name, rec.object, rec.method, rec.args, tc.object, want.Name, len(args)-1)
				}
			}
		})
	}
}
