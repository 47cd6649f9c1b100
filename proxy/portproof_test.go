//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
)

// serveProof serves proofs under key on a SO_REUSEPORT listener, as a
// cluster's proxy does.
func serveProof(t *testing.T, key []byte) string {
	t.Helper()
	ln, err := Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !servePortProof(w, r, func() []byte { return key }) {
			http.NotFound(w, r)
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

func TestProbePort(t *testing.T) {
	ours, theirs := []byte("0123456789abcdef0123456789abcdef"), []byte("another-cluster-key-0123456789ab")
	plain := func() string { // another program speaking HTTP
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("hi")) })}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		return ln.Addr().String()
	}
	garbage := func() string { // not HTTP at all
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write([]byte("SSH-2.0-OpenSSH\r\n"))
				c.Close()
			}
		}()
		t.Cleanup(func() { ln.Close() })
		return ln.Addr().String()
	}
	closed := func() string { return testutil.RefusedAddr(t) } // nobody listens
	tests := []struct {
		name    string
		addr    string
		wantErr string // "" = may share
	}{
		{"same cluster", serveProof(t, ours), ""},
		{"another cluster", serveProof(t, theirs), "another cluster"},
		{"another HTTP program", plain(), "another program"},
		{"not HTTP", garbage(), "does not speak HTTP"},
		{"nobody", closed(), ""},
		{"port 0", "127.0.0.1:0", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ProbePort(context.Background(), tt.addr, ours)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ProbePort: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrForeignListener) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ProbePort = %v, want ErrForeignListener saying %q", err, tt.wantErr)
			}
		})
	}
}

func TestListenSharedJoinsOnlyItsCluster(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	addr := serveProof(t, key)
	ln, err := ListenShared(context.Background(), addr, key)
	if err != nil {
		t.Fatalf("same cluster may share: %v", err)
	}
	ln.Close()
	if _, err := ListenShared(context.Background(), addr, []byte("another-cluster-key-0123456789ab")); !errors.Is(err, ErrForeignListener) {
		t.Fatalf("another cluster must be refused, got %v", err)
	}
	if _, err := ListenShared(context.Background(), addr, nil); err == nil {
		t.Fatal("no key must be refused")
	}
}

func TestPortProofAnswer(t *testing.T) {
	p := New(Config{Router: &fakeRouter{}, PortKey: func() []byte { return []byte("k") }})
	for _, tt := range []struct {
		name, path, nonce string
		want              int
	}{
		{"proof", PortProofPath, strings.Repeat("a", 32), http.StatusNoContent},
		{"short nonce", PortProofPath, "abc", http.StatusBadRequest},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := http.NewRequest(http.MethodGet, "http://x"+tt.path, nil)
			r.Header.Set(portNonceHeader, tt.nonce)
			w := &recorder{h: http.Header{}}
			p.ServeHTTP(w, r)
			if w.code != tt.want {
				t.Fatalf("status %d, want %d", w.code, tt.want)
			}
			if tt.want == http.StatusNoContent && w.h.Get(portProofHeader) != portProof([]byte("k"), tt.nonce) {
				t.Fatal("wrong proof")
			}
		})
	}
}

type recorder struct {
	h    http.Header
	code int
}

func (r *recorder) Header() http.Header         { return r.h }
func (r *recorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *recorder) WriteHeader(c int)           { r.code = c }
