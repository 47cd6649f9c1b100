package rmi_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// peerID is the peer type the tests' Identify hooks give calls.
type peerID string

// whoAmI answers the peer its call was given, "<none>" without one.
type whoAmI struct{ ran atomic.Int32 }

func (w *whoAmI) Who(ctx context.Context) (string, error) {
	w.ran.Add(1)
	p, ok := rmi.PeerFrom[peerID](ctx)
	if !ok {
		return "<none>", nil
	}
	return string(p), nil
}

// Self passes the object by reference, whose calls are identified too.
func (w *whoAmI) Self(ctx context.Context) (*rmi.Exported, error) { return rmi.Export(w), nil }

func withIdentify(f func(*rmi.Conn) (any, error)) nodeOpt {
	return func(c *rmi.Config) { c.Identify = f }
}

// refuseAfter lets n calls through with a peer named after the caller,
// then refuses every call with code.
func refuseAfter(n int32, code string) func(*rmi.Conn) (any, error) {
	var calls atomic.Int32
	return func(c *rmi.Conn) (any, error) {
		if calls.Add(1) > n {
			return nil, &codedErr{code: code, msg: "who are you?"}
		}
		return peerID("id:" + c.PeerName()), nil
	}
}

// TestIdentify: Config.Identify gives each incoming call, to a named or an
// exported object, a typed peer, or refuses it before the method runs; it
// runs per call, so its answer may change over a connection's life.
func TestIdentify(t *testing.T) {
	tests := []struct {
		name     string
		identify func(*rmi.Conn) (any, error)
		viaRef   bool     // Who is called over a reference from Self
		calls    int      // how many times Who is called
		want     []string // Who's answers, "refused" for a refusal
	}{
		{name: "no hook", calls: 1, want: []string{"<none>"}},
		{name: "typed peer", identify: refuseAfter(2, ""), calls: 2, want: []string{"id:w-1", "id:w-1"}},
		{name: "a peer of another type", identify: func(*rmi.Conn) (any, error) { return 42, nil }, calls: 1, want: []string{"<none>"}},
		{name: "refused", identify: refuseAfter(0, "app.unknown_peer"), calls: 1, want: []string{"refused"}},
		{name: "refused once the answer changes", identify: refuseAfter(1, "app.unknown_peer"), calls: 2, want: []string{"id:w-1", "refused"}},
		{name: "typed peer over a reference", identify: refuseAfter(2, ""), viaRef: true, calls: 1, want: []string{"id:w-1"}},
		{name: "refused over a reference", identify: refuseAfter(1, "app.unknown_peer"), viaRef: true, calls: 1, want: []string{"refused"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obj := &whoAmI{}
			srv, _ := newNode(t, "master", withIdentify(tc.identify))
			if err := srv.Register("who", obj); err != nil {
				t.Fatal(err)
			}
			cl, _ := newNode(t, "w-1")
			c, err := cl.Dial(testCtx(t), serve(t, srv, ""))
			if err != nil {
				t.Fatal(err)
			}
			who := c.Object("who")
			if tc.viaRef {
				if err := c.Call(testCtx(t), "who", "Self", &who); err != nil {
					t.Fatal(err)
				}
			}
			var ran int32
			for i := range tc.calls {
				var got string
				err := who.Call(testCtx(t), "Who", &got)
				var re *rmi.RemoteError
				switch {
				case tc.want[i] == "refused":
					if !errors.As(err, &re) || re.Code != "app.unknown_peer" {
						t.Fatalf("call %d: %v, want a refusal with code app.unknown_peer", i, err)
					}
				case err != nil || got != tc.want[i]:
					t.Fatalf("call %d: Who = %q, %v; want %q", i, got, err, tc.want[i])
				default:
					ran++
				}
			}
			if n := obj.ran.Load(); n != ran {
				t.Fatalf("Who ran %d times, want %d: a refused call must not run", n, ran)
			}
		})
	}
}
