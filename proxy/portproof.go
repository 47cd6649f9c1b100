package proxy

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"
)

// The public port is shared with SO_REUSEPORT by the proxies of one
// cluster. The kernel lets any process of the same user join such a port,
// so before binding, a process asks whoever already listens there to prove
// it belongs to the same cluster: it sends a nonce and expects an HMAC of
// it under the cluster's port key. A listener that cannot prove it (another
// cluster, another program) makes the new process refuse to start.

// PortProofPath is where proxies answer the proof (a reserved first
// segment, so never an app's).
const PortProofPath = "/_cb/port-proof"

const (
	portNonceHeader = "X-Cloudbrowser-Port-Nonce"
	portProofHeader = "X-Cloudbrowser-Port-Proof"
)

// ErrForeignListener: the port is served by something that is not part of
// this cluster.
var ErrForeignListener = errors.New("the public port is already served by another cluster or program")

func portProof(key []byte, nonce string) string {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("cloudbrowser-port-proof\x00"))
	h.Write([]byte(nonce))
	return hex.EncodeToString(h.Sum(nil))
}

// servePortProof answers a probe; false if r is not one (or no key yet).
func servePortProof(w http.ResponseWriter, r *http.Request, key func() []byte) bool {
	if key == nil || r.URL.Path != PortProofPath {
		return false
	}
	nonce := r.Header.Get(portNonceHeader)
	k := key()
	if len(nonce) < 16 || len(nonce) > 128 || len(k) == 0 {
		http.Error(w, "no proof", http.StatusBadRequest)
		return true
	}
	w.Header().Set(portProofHeader, portProof(k, nonce))
	w.WriteHeader(http.StatusNoContent)
	return true
}

// dialAddr turns a listen address into one to dial (":8080" → loopback).
func dialAddr(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1" // a wildcard listener (dual-stack for "::") answers here
	}
	return net.JoinHostPort(host, port), nil
}

// ProbePort checks who serves listen now. nil: nobody, or a process that
// proved it is of the cluster whose port key is key. ErrForeignListener
// (wrapped, with what answered) otherwise.
func ProbePort(ctx context.Context, listen string, key []byte) error {
	_, err := probePort(ctx, listen, key)
	return err
}

// portMode is how this cluster's proxies serve a probed port.
type portMode int

const (
	portFree portMode = iota // nobody listens
	portPlain
	portTLS
)

// errNobody: nothing listens on the probed port.
var errNobody = errors.New("nobody listens")

// probePort is ProbePort, also telling whether the proof came over TLS
// (the port's proxies serve --tls-cert).
func probePort(ctx context.Context, listen string, key []byte) (portMode, error) {
	addr, err := dialAddr(listen)
	if err != nil {
		return portFree, fmt.Errorf("proxy: listen address %q: %w", listen, err)
	}
	if _, port, _ := net.SplitHostPort(addr); port == "0" {
		return portFree, nil // a fresh port each time: nobody to share with
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	a, err := askProof(ctx, addr, nil, key)
	if errors.Is(err, errNobody) {
		return portFree, nil
	}
	mode := portPlain
	if errors.Is(err, ErrForeignListener) || err == nil && !a.proved && !a.foreign {
		// A TLS port answers plain text with a 400 (net/http's) or not
		// at all: ask again over TLS. Its certificate is not checked: the
		// proof under the port key is what tells the cluster.
		tc := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}} //nolint:gosec // see above
		if ta, terr := askProof(ctx, addr, tc, key); terr == nil && (ta.proved || ta.foreign) {
			a, err, mode = ta, nil, portTLS
		}
	}
	switch {
	case err != nil:
		return portFree, err
	case a.foreign:
		return portFree, fmt.Errorf("%w: %s is a CloudBrowser proxy of another cluster (different cluster secret)", ErrForeignListener, addr)
	case !a.proved:
		return portFree, fmt.Errorf("%w: %s answered %s without a CloudBrowser port proof (another program?)", ErrForeignListener, addr, a.status)
	}
	return mode, nil
}

// proofAnswer is what one probe got.
type proofAnswer struct {
	proved  bool   // a valid proof
	foreign bool   // a proof under another key
	status  string // the answer's status
}

// askProof asks addr for a proof once, over TLS if tc is set.
func askProof(ctx context.Context, addr string, tc *tls.Config, key []byte) (proofAnswer, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" && ctx.Err() == nil {
			return proofAnswer{}, errNobody // refused
		}
		return proofAnswer{}, fmt.Errorf("proxy: probing %s: %w", addr, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if tc != nil {
		tconn := tls.Client(conn, tc)
		if err := tconn.HandshakeContext(ctx); err != nil {
			return proofAnswer{}, fmt.Errorf("proxy: probing %s over TLS: %w", addr, err)
		}
		conn = tconn
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	nonce := hex.EncodeToString(b)
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+PortProofPath, nil)
	req.Header.Set(portNonceHeader, nonce)
	req.Close = true
	if err := req.Write(conn); err != nil {
		return proofAnswer{}, fmt.Errorf("proxy: probing %s: %w", addr, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return proofAnswer{}, fmt.Errorf("%w: %s accepts connections but does not speak HTTP (%v)", ErrForeignListener, addr, err)
	}
	resp.Body.Close()
	got := resp.Header.Get(portProofHeader)
	if got == "" {
		return proofAnswer{status: resp.Status}, nil
	}
	ok := hmac.Equal([]byte(got), []byte(portProof(key, nonce)))
	return proofAnswer{proved: ok, foreign: !ok, status: resp.Status}, nil
}

// postBindProbes is how many times a proxy re-probes right after binding:
// two processes of different clusters that probed at the same moment both
// found the port free; each probe lands on a random listener, so a few
// catch the other one.
const postBindProbes = 4

// ListenShared binds listen with SO_REUSEPORT for the proxies of one
// cluster: it refuses (ErrForeignListener) when the port is already served
// by anything that cannot prove it holds the same port key, and re-checks
// right after binding.
func ListenShared(ctx context.Context, listen string, key []byte) (net.Listener, error) {
	if len(key) == 0 {
		return nil, errors.New("proxy: no port key (the master sends it; is it older than this proxy?)")
	}
	if _, port, err := net.SplitHostPort(listen); err != nil || port != "0" { // port 0: nobody there to ask
		if err := ProbePort(ctx, listen, key); err != nil {
			return nil, err
		}
	}
	ln, err := Listen(ctx, "tcp", listen)
	if err != nil {
		return nil, err
	}
	return ln, nil
}

// BoundAddr is listen with the port ln got: the host as configured (a
// wildcard stays a wildcard), the port as bound (port 0 becomes real).
func BoundAddr(listen string, ln net.Listener) string {
	host, _, err := net.SplitHostPort(listen)
	ta, ok := ln.Addr().(*net.TCPAddr)
	if err != nil || !ok {
		return ln.Addr().String()
	}
	return net.JoinHostPort(host, strconv.Itoa(ta.Port))
}

// VerifyShared re-probes a port this process already serves (with srv
// answering proofs), closing nothing itself; the caller stops serving on
// error.
func VerifyShared(ctx context.Context, listen string, key []byte) error {
	for range postBindProbes {
		if err := ProbePort(ctx, listen, key); err != nil {
			return err
		}
	}
	return nil
}
