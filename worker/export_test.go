package worker

import (
	"context"
	"errors"
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// registrar is a master's WorkerManager that hands over the reference
// each registration passes.
type registrar struct{ refs chan *rmi.Ref }

func (r registrar) Register(ctx context.Context, info wire.WorkerInfo, insts []wire.InstanceInfo, apps *rmi.Ref) (wire.RegisterReply, error) {
	select {
	case r.refs <- apps:
	default:
	}
	return wire.RegisterReply{HopKey: testHopKey, ReportPeriod: int64(time.Hour)}, nil
}

func (r registrar) Report(ctx context.Context, load wire.Load) error { return nil }

type clusterInfo struct{}

func (clusterInfo) Info(ctx context.Context) (wire.ClusterInfo, error) {
	return wire.ClusterInfo{MasterID: "m-test"}, nil
}

// TestMasterReachesOnlyTheContract: what a worker hands the master at
// registration answers exactly contract.WorkerApps. Every other RMI-shaped
// method of the Application Manager (OpenBrowser, which skips the
// per-address browser quota) is rmi.ErrNoMethod to the master.
func TestMasterReachesOnlyTheContract(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	master, err := rmi.New(rmi.Config{Name: "m-test", Secret: []byte(testSecret), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	reg := registrar{refs: make(chan *rmi.Ref, 1)}
	if err := master.Register(wire.ObjWorkerManager, reg); err != nil {
		t.Fatal(err)
	}
	if err := master.Register(wire.ObjCluster, clusterInfo{}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveCtx, stop := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); _ = master.Serve(serveCtx, ln) }()
	defer func() { stop(); master.Close(); <-served }()

	w, err := New(Config{ID: "w-test", Secret: testSecret, Master: ln.Addr().String(), Listen: "127.0.0.1:0", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var ref *rmi.Ref
	select {
	case ref = <-reg.refs:
	case <-ctx.Done():
		t.Fatal("the worker did not register")
	}

	inContract := map[string]bool{}
	ct := reflect.TypeFor[contract.WorkerApps]()
	for i := range ct.NumMethod() {
		inContract[ct.Method(i).Name] = true
	}
	ctxType := reflect.TypeFor[context.Context]()
	var others []string
	at := reflect.TypeFor[*AppManager]()
	for i := range at.NumMethod() {
		m := at.Method(i) // rmi's rule: exported, ctx first
		if m.Type.NumIn() >= 2 && m.Type.In(1) == ctxType && !inContract[m.Name] {
			others = append(others, m.Name)
		}
	}
	if len(others) == 0 {
		t.Fatal("no Application Manager method outside the contract: the test checks nothing")
	}
	for _, name := range others {
		if err := ref.Call(ctx, name, nil); !errors.Is(err, rmi.ErrNoMethod) {
			t.Errorf("master calling %s: %v, want rmi.ErrNoMethod", name, err)
		}
	}
	// The contract's methods are there.
	apps := contract.WorkerAppsClient{R: ref}
	if _, err := apps.Browsers(ctx, "w-test.nope"); !isCode(err, wire.CodeUnknownInstance) {
		t.Errorf("Browsers: %v, want %s", err, wire.CodeUnknownInstance)
	}
	if err := apps.Grant(ctx, wire.BrowserGrant{Instance: "w-test.nope", Principal: "bob", Role: "reader"}); !isCode(err, wire.CodeUnknownInstance) {
		t.Errorf("Grant: %v, want %s", err, wire.CodeUnknownInstance)
	}
	if _, err := apps.OpenBrowserFor(ctx, wire.OpenBrowser{InstanceID: "w-test.nope", User: "bob"}); !isCode(err, wire.CodeUnknownInstance) {
		t.Errorf("OpenBrowserFor: %v, want %s", err, wire.CodeUnknownInstance)
	}
}

func isCode(err error, code string) bool {
	var re *rmi.RemoteError
	return errors.As(err, &re) && re.Code == code
}

// hasCode: an in-process call failed with code.
func hasCode(err error, code string) bool {
	var we *wire.Error
	return errors.As(err, &we) && we.Code == code
}
