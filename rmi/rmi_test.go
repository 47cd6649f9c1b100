package rmi_test

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

func TestNewValidates(t *testing.T) {
	testutil.NoLeaks(t)
	tests := []struct {
		name string
		cfg  rmi.Config
		ok   bool
	}{
		{"ok", rmi.Config{Name: "n", Secret: testSecret}, true},
		{"short secret", rmi.Config{Name: "n", Secret: []byte("short")}, false},
		{"no secret", rmi.Config{Name: "n"}, false},
		{"no name", rmi.Config{Secret: testSecret}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := rmi.New(tc.cfg)
			if (err == nil) != tc.ok {
				t.Fatalf("New: err=%v, want ok=%v", err, tc.ok)
			}
			if n != nil {
				_ = n.Close()
			}
		})
	}
}

func TestRegister(t *testing.T) {
	testutil.NoLeaks(t)
	n, _ := newNode(t, "n")
	if err := n.Register("m", newMasterAPI()); err != nil {
		t.Fatal(err)
	}
	if err := n.Register("m", newMasterAPI()); err == nil {
		t.Error("duplicate name accepted")
	}
	if err := n.Register("x", struct{}{}); err == nil {
		t.Error("object without eligible methods accepted")
	}
	if err := n.Register("", newMasterAPI()); err == nil {
		t.Error("empty name accepted")
	}
	n.Unregister("m")
	if err := n.Register("m", newMasterAPI()); err != nil {
		t.Errorf("re-register after Unregister: %v", err)
	}
}

func TestCallsBothWays(t *testing.T) {
	testutil.NoLeaks(t)
	p := newPair(t, nil, nil)
	ctx := testCtx(t)

	if p.toMaster.PeerName() != "master" || p.toWorker.PeerName() != "w-1" {
		t.Fatalf("peer names %q, %q", p.toMaster.PeerName(), p.toWorker.PeerName())
	}
	var sum int
	if err := p.toMaster.Call(ctx, "master", "Add", &sum, 2, 3); err != nil || sum != 5 {
		t.Fatalf("worker->master Add = %d, %v", sum, err)
	}
	// The master calls the worker over the connection the worker dialed.
	var pong string
	if err := p.toWorker.Call(ctx, "worker", "Ping", &pong, "hi"); err != nil || pong != "pong:hi" {
		t.Fatalf("master->worker Ping = %q, %v", pong, err)
	}
	// Nested: during a worker->master call, the master calls back the worker.
	var out string
	if err := p.toMaster.Object("master").Call(ctx, "PingBack", &out, "x"); err != nil || out != "master saw pong:x" {
		t.Fatalf("PingBack = %q, %v", out, err)
	}
	var who string
	if err := p.toMaster.Call(ctx, "master", "WhoAmI", &who); err != nil || who != "w-1" {
		t.Fatalf("WhoAmI = %q, %v", who, err)
	}
	// nil reply discards the result.
	if err := p.toMaster.Call(ctx, "master", "Add", nil, 1, 1); err != nil {
		t.Fatal(err)
	}
	if got := len(p.master.Conns()); got != 1 {
		t.Errorf("master has %d conns, want 1", got)
	}
}

func TestRoundTripTypes(t *testing.T) {
	testutil.NoLeaks(t)
	p := newPair(t, nil, nil)
	in := Payload{
		Name:  "héllo",
		Big:   math.MaxUint64,
		Neg:   math.MinInt64,
		F:     3.25,
		When:  time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC),
		Data:  []byte{0, 1, 2, 255},
		Tags:  []string{"a", "b"},
		Meta:  map[string]string{"k": "v"},
		Inner: &Inner{X: -7, Label: "in", Attrs: map[string]int{"z": 26}},
		Items: []Inner{{X: 1}, {X: 2, Label: "two", Attrs: map[string]int{}}},
		Skip:  "not sent",
	}
	var out Payload
	if err := p.toMaster.Call(testCtx(t), "master", "Echo", &out, in); err != nil {
		t.Fatal(err)
	}
	want := in
	want.Skip = ""
	if !out.When.Equal(want.When) {
		t.Errorf("time %v, want %v", out.When, want.When)
	}
	out.When, want.When = time.Time{}, time.Time{}
	if !reflect.DeepEqual(out, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", out, want)
	}

	// Untyped replies decode into natural types with string-keyed maps.
	var generic any
	if err := p.toMaster.Call(testCtx(t), "master", "Echo", &generic, in); err != nil {
		t.Fatal(err)
	}
	m, ok := generic.(map[string]any)
	if !ok || m["name"] != "héllo" {
		t.Errorf("generic reply = %#v", generic)
	}
}

// Nil slices, maps and pointers are valid arguments.
func TestNilArguments(t *testing.T) {
	testutil.NoLeaks(t)
	p := newPair(t, nil, nil)
	tests := []struct {
		name string
		args []any
		want int
	}{
		{"all nil", []any{[]string(nil), map[string]int(nil), (*Inner)(nil)}, 0},
		{"untyped nil", []any{nil, nil, nil}, 0},
		{"values", []any{[]string{"a", "b"}, map[string]int{"x": 1}, &Inner{}}, 103},
		{"empty", []any{[]string{}, map[string]int{}, (*Inner)(nil)}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var n int
			if err := p.toMaster.Call(testCtx(t), "master", "Count", &n, tc.args...); err != nil {
				t.Fatal(err)
			}
			if n != tc.want {
				t.Fatalf("got %d, want %d", n, tc.want)
			}
		})
	}
}

func TestRemoteRefs(t *testing.T) {
	testutil.NoLeaks(t)
	p := newPair(t, nil, nil)
	ctx := testCtx(t)

	am := &appManager{}
	if err := p.toMaster.Call(ctx, "master", "Register", nil, WorkerInfo{ID: "w-1", Addr: "x"}, rmi.Export(am)); err != nil {
		t.Fatal(err)
	}
	recv(t, p.masterObj.registered)
	ref := p.masterObj.worker("w-1")
	if ref.Conn().PeerName() != "w-1" {
		t.Errorf("ref bound to %q", ref.Conn().PeerName())
	}
	var got string
	if err := ref.Call(ctx, "Launch", &got, "mail"); err != nil || got != "mail@w-1" {
		t.Fatalf("Launch via ref = %q, %v", got, err)
	}
	if err := ref.Call(ctx, "Nope", nil); !errors.Is(err, rmi.ErrNoMethod) {
		t.Errorf("unknown method via ref: %v", err)
	}

	// A reference returned as a result; Release drops it on the peer.
	var cref *rmi.Ref
	if err := p.toMaster.Call(ctx, "master", "NewCounter", &cref, 10); err != nil {
		t.Fatal(err)
	}
	for want := 11; want <= 12; want++ {
		var n int
		if err := cref.Call(ctx, "Inc", &n); err != nil || n != want {
			t.Fatalf("Inc = %d, %v; want %d", n, err, want)
		}
	}
	if err := cref.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cref.Call(ctx, "Inc", nil); !errors.Is(err, rmi.ErrNoObject) {
		t.Errorf("call after Release: %v", err)
	}

	// Nested references are refused rather than silently emptied.
	type wrap struct{ E *rmi.Exported }
	if err := p.toMaster.Call(ctx, "master", "Echo", nil, wrap{rmi.Export(am)}); err == nil {
		t.Error("nested *Exported accepted")
	}
	// A reply target that is not **Ref cannot take a reference.
	var wrong int
	if err := p.toMaster.Call(ctx, "master", "NewCounter", &wrong, 1); !errors.Is(err, rmi.ErrBadArgs) {
		t.Errorf("ref into int: %v", err)
	}

	// References die with the connection.
	if err := p.toMaster.Close(); err != nil {
		t.Fatal(err)
	}
	recv(t, ref.Conn().Done())
	if err := ref.Call(ctx, "Launch", &got, "x"); !errors.Is(err, rmi.ErrClosed) {
		t.Errorf("after close: %v, want ErrClosed", err)
	}
	if err := ref.Conn().Err(); !errors.Is(err, rmi.ErrClosed) {
		t.Errorf("Conn.Err = %v", err)
	}
	am.mu.Lock()
	defer am.mu.Unlock()
	if !reflect.DeepEqual(am.launched, []string{"mail"}) {
		t.Errorf("launched %v", am.launched)
	}
}

func TestDeadlineAndCancel(t *testing.T) {
	testutil.NoLeaks(t)
	p := newPair(t, nil, nil)
	m := p.masterObj

	t.Run("deadline", func(t *testing.T) {
		// Long enough for the call to reach the callee even on a loaded
		// machine; the test does not depend on how long it takes.
		ctx, cancel := context.WithTimeout(testCtx(t), 250*time.Millisecond)
		defer cancel()
		err := p.toMaster.Call(ctx, "master", "Block", nil)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want DeadlineExceeded", err)
		}
		if d := recv(t, m.deadline); d < 0 {
			t.Error("callee ctx had no deadline")
		}
		if err := recv(t, m.blockErr); err == nil {
			t.Error("callee ctx not done")
		}
	})
	t.Run("deadline value propagates", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(testCtx(t), time.Hour)
		defer cancel()
		errc := make(chan error, 1)
		go func() { errc <- p.toMaster.Call(ctx, "master", "Block", nil) }()
		d := recv(t, m.deadline)
		if d <= 0 || d > time.Hour {
			t.Errorf("callee saw %v left, want within (0, 1h]", d)
		}
		recv(t, m.blocked)
		cancel()
		if err := recv(t, errc); !errors.Is(err, context.Canceled) {
			t.Errorf("caller err = %v", err)
		}
		if err := recv(t, m.blockErr); !errors.Is(err, context.Canceled) {
			t.Errorf("callee err = %v, want Canceled", err)
		}
	})
	t.Run("no deadline", func(t *testing.T) {
		ctx, cancel := context.WithCancel(testCtx(t))
		defer cancel()
		// testCtx has a deadline; strip it to check the no-deadline path.
		ctx2, cancel2 := context.WithCancel(context.WithoutCancel(ctx))
		defer cancel2()
		errc := make(chan error, 1)
		go func() { errc <- p.toMaster.Call(ctx2, "master", "Block", nil) }()
		if d := recv(t, m.deadline); d != -1 {
			t.Errorf("callee deadline %v, want none", d)
		}
		recv(t, m.blocked)
		cancel2()
		if err := recv(t, errc); !errors.Is(err, context.Canceled) {
			t.Errorf("caller err = %v", err)
		}
		recv(t, m.blockErr)
	})
	t.Run("already cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := p.toMaster.Call(ctx, "master", "Add", nil, 1, 2); !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v", err)
		}
	})
	// The connection is still fine.
	var sum int
	if err := p.toMaster.Call(testCtx(t), "master", "Add", &sum, 1, 2); err != nil || sum != 3 {
		t.Fatalf("Add after cancels = %d, %v", sum, err)
	}
}

func TestConcurrentCalls(t *testing.T) {
	testutil.NoLeaks(t)
	p := newPair(t, nil, nil)
	ctx := testCtx(t)
	const n = 100
	results := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c := p.toMaster
			if i%2 == 1 { // half of them the other way round
				var s string
				errs[i] = p.toWorker.Call(ctx, "worker", "Ping", &s, "x")
				results[i] = i * 1000
				if s != "pong:x" {
					errs[i] = errors.New("bad pong " + s)
				}
				return
			}
			errs[i] = c.Call(ctx, "master", "Add", &results[i], i, i*999)
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || results[i] != i*1000 {
			t.Errorf("call %d: %d, %v", i, results[i], errs[i])
		}
	}
}

func TestErrors(t *testing.T) {
	testutil.NoLeaks(t)
	p := newPair(t, nil, nil)
	ctx := testCtx(t)
	tests := []struct {
		name     string
		object   string
		method   string
		args     []any
		is       error
		code     string
		contains string
	}{
		{"unknown object", "nobody", "Add", []any{1, 2}, rmi.ErrNoObject, rmi.CodeNoObject, "nobody"},
		{"unknown method", "master", "Sub", []any{1, 2}, rmi.ErrNoMethod, rmi.CodeNoMethod, "Sub"},
		{"ineligible method", "master", "NoCtx", []any{1}, rmi.ErrNoMethod, rmi.CodeNoMethod, "NoCtx"},
		{"too few args", "master", "Add", []any{1}, rmi.ErrBadArgs, rmi.CodeBadArgs, "takes 2"},
		{"too many args", "master", "Add", []any{1, 2, 3}, rmi.ErrBadArgs, rmi.CodeBadArgs, "takes 2"},
		{"wrong arg type", "master", "Add", []any{"one", 2}, rmi.ErrBadArgs, rmi.CodeBadArgs, "arg 0"},
		{"ref for plain param", "master", "Add", []any{rmi.Export(&counter{}), 2}, rmi.ErrBadArgs, rmi.CodeBadArgs, "reference"},
		{"plain for ref param", "master", "Register", []any{WorkerInfo{}, 5}, rmi.ErrBadArgs, rmi.CodeBadArgs, "reference"},
		{"panic", "master", "Panic", nil, rmi.ErrPanic, rmi.CodePanic, "boom"},
		{"app code", "master", "Fail", []any{"app.not_found", "no such app"}, nil, "app.not_found", "no such app"},
		{"plain error", "master", "Fail", []any{"", "plain"}, nil, "", "plain"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := p.toMaster.Call(ctx, tc.object, tc.method, nil, tc.args...)
			var re *rmi.RemoteError
			if !errors.As(err, &re) {
				t.Fatalf("err = %v (%T), want *RemoteError", err, err)
			}
			if re.Code != tc.code {
				t.Errorf("code %q, want %q", re.Code, tc.code)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("errors.Is(%v, %v) = false", err, tc.is)
			}
			if !strings.Contains(re.Message, tc.contains) {
				t.Errorf("message %q lacks %q", re.Message, tc.contains)
			}
		})
	}
	if !p.masterLog.Contains("method panicked") || !p.masterLog.Contains("goroutine") {
		t.Error("panic not logged with stack")
	}
	// Local argument problems fail before anything is sent.
	if err := p.toMaster.Call(ctx, "master", "Add", 5, 1, 2); !errors.Is(err, rmi.ErrBadArgs) {
		t.Errorf("non-pointer reply: %v", err)
	}
	var sum int
	if err := p.toMaster.Call(ctx, "master", "Add", &sum, 20, 22); err != nil || sum != 42 {
		t.Fatalf("conn unusable after errors: %d, %v", sum, err)
	}
}

func TestOversizedFrames(t *testing.T) {
	testutil.NoLeaks(t)
	const limit = 64 << 10
	p := newPair(t, []nodeOpt{withMaxFrame(limit)}, []nodeOpt{withMaxFrame(4 * limit)})
	ctx := testCtx(t)

	// An oversized reply becomes an error reply; the conn survives.
	err := p.toMaster.Call(ctx, "master", "Blob", nil, 2*limit)
	if !errors.Is(err, rmi.ErrFrameTooLarge) {
		t.Fatalf("big reply: %v", err)
	}
	// An outgoing call over the caller's own limit fails locally.
	err = p.toWorker.Call(ctx, "worker", "Ping", nil, strings.Repeat("x", 2*limit))
	if !errors.Is(err, rmi.ErrFrameTooLarge) {
		t.Fatalf("big local call: %v", err)
	}
	if err := p.toWorker.Call(ctx, "worker", "Ping", nil, "small"); err != nil {
		t.Fatalf("conn dead after local oversize: %v", err)
	}
	// A frame over the receiver's limit closes the connection.
	err = p.toMaster.Call(ctx, "master", "Sink", nil, make([]byte, 2*limit))
	if !errors.Is(err, rmi.ErrClosed) {
		t.Fatalf("big remote call: %v, want ErrClosed", err)
	}
	testutil.Eventually(t, 10*time.Second, testutil.Cond("oversize logged", func() bool { return p.masterLog.Contains("frame too large") }))
}

func TestAuthFailure(t *testing.T) {
	testutil.NoLeaks(t)
	master, masterLog := newNode(t, "master")
	if err := master.Register("master", &workerAPI{}); err != nil {
		t.Fatal(err)
	}
	addr := serve(t, master, "")
	intruder, _ := newNode(t, "intruder", withSecret("a-different-secret-entirely"))

	_, err := intruder.Dial(testCtx(t), addr)
	if !errors.Is(err, rmi.ErrAuth) {
		t.Fatalf("dial with wrong secret: %v, want ErrAuth", err)
	}
	testutil.Eventually(t, 10*time.Second, testutil.Cond("server logs auth failure", func() bool {
		return masterLog.Contains("authentication failed") && masterLog.Contains(`"remote":"127.0.0.1:`)
	}))
	// No connection exists on either side, so no call can be made.
	if len(master.Conns()) != 0 || len(intruder.Conns()) != 0 {
		t.Error("a connection survived a failed handshake")
	}
}

func TestHandshakeTimeout(t *testing.T) {
	testutil.NoLeaks(t)
	master, masterLog := newNode(t, "master", withHandshake(100*time.Millisecond))
	addr := serve(t, master, "")

	// A peer that connects and says nothing is dropped.
	var d net.Dialer
	nc, err := d.DialContext(testCtx(t), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second)) // hang guard only
	if _, err := io.ReadAll(nc); err != nil {
		t.Fatalf("want clean close by server, got %v", err)
	}
	testutil.Eventually(t, 10*time.Second, testutil.Cond("timeout logged", func() bool { return masterLog.Contains("handshake failed") }))

	// A server that never answers: Dial gives up after the timeout.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	client, _ := newNode(t, "c", withHandshake(100*time.Millisecond))
	if _, err := client.Dial(testCtx(t), ln.Addr().String()); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("dial silent server: %v", err)
	}
	if c := recv(t, accepted); c != nil {
		c.Close()
	}
}

func TestCloseFailsPending(t *testing.T) {
	testutil.NoLeaks(t)
	p := newPair(t, nil, nil)
	errc := make(chan error, 1)
	go func() { errc <- p.toMaster.Call(testCtx(t), "master", "Block", nil) }()
	recv(t, p.masterObj.blocked)
	// Closing the master node cancels the running method and fails the call.
	if err := p.master.Close(); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, errc); !errors.Is(err, rmi.ErrClosed) {
		t.Errorf("pending call: %v, want ErrClosed", err)
	}
	if err := recv(t, p.masterObj.blockErr); !errors.Is(err, context.Canceled) {
		t.Errorf("method ctx: %v", err)
	}
	if _, err := p.master.Dial(testCtx(t), p.addr); !errors.Is(err, rmi.ErrClosed) {
		t.Errorf("Dial on closed node: %v", err)
	}
}
