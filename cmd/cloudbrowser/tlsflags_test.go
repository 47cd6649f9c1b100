package main

import (
	"context"
	"io"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/httpsec"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/tlsfront"
	"github.com/cloudbrowser-go/cloudbrowser/internal/tlsfront/tlstest"
	"github.com/cloudbrowser-go/cloudbrowser/master"
)

// TestTLSFlagErrors: a pair that cannot be used stops the command at
// start with the flag and the file named; so do half a pair, a bad CIDR
// and a redirect with nothing to redirect to.
func TestTLSFlagErrors(t *testing.T) {
	ca := tlstest.NewCA(t)
	dir := t.TempDir()
	cert, key := ca.Issue(t).Write(t, dir)
	otherKey := filepath.Join(dir, "other.key")
	tlstest.WriteFile(t, otherKey, ca.Issue(t).KeyPEM)
	missing := filepath.Join(dir, "missing.crt")
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"no certificate file", []string{"--tls-cert", missing, "--tls-key", key}, []string{"--tls-cert", missing}},
		{"key of another certificate", []string{"--tls-cert", cert, "--tls-key", otherKey}, []string{"--tls-key", otherKey}},
		{"certificate without key", []string{"--tls-cert", cert}, []string{"--tls-key: required"}},
		{"key without certificate", []string{"--tls-key", key}, []string{"--tls-cert: required"}},
		{"bad CIDR", []string{"--trusted-proxies", "10.0.0.0/8,nope"}, []string{"--trusted-proxies", "nope"}},
		{"redirect to nothing", []string{"--https-redirect", "127.0.0.1:0"}, []string{"--https-redirect", "--tls-cert"}},
	} {
		for _, command := range []string{"master", "proxy"} {
			t.Run(command+"/"+tc.name, func(t *testing.T) {
				args := []string{"cloudbrowser", "--log-level", "error", command}
				if command == "master" {
					args = append(args, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--rmi", "127.0.0.1:0", "--admin", "")
				} else {
					sf := filepath.Join(t.TempDir(), "proxy.key")
					tlstest.WriteFile(t, sf, []byte(frontSecret+"\n"))
					args = append(args, "--secret-file", sf, "--master", testutil.RefusedAddr(t), "--listen", "127.0.0.1:0")
				}
				err := app().Run(context.Background(), append(args, tc.args...))
				if err == nil {
					t.Fatal("started")
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not name %q", err, w)
					}
				}
			})
		}
	}
}

// TestEmbeddedProxyTLS: with --tls-cert the master's embedded proxy serves
// HTTPS (HSTS on its pages and the master's, Secure implied for the
// workers), the redirect listener sends plain HTTP there, and its
// address is in the ready file's set.
func TestEmbeddedProxyTLS(t *testing.T) {
	ca := tlstest.NewCA(t)
	pair := ca.Issue(t)
	cert, key := pair.Write(t, t.TempDir())
	store, err := tlsfront.New(tlsfront.Files{Cert: cert, Key: key}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	m, err := master.New(master.Config{Secret: frontSecret, AdminToken: "admintok", PublicAddr: "127.0.0.1:0",
		PublicTLS: true, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	m.SetFront(newFrontTLS(m, frontTLS{store: store, redirect: "127.0.0.1:0", log: testutil.Logger(t)}))
	if err := m.Start(context.Background()); err != nil {
		m.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if !m.ProxySettings().PublicHTTPS {
		t.Error("serving TLS does not make the public side HTTPS (workers would not set Secure cookies)")
	}

	c := &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientConfig()},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer c.CloseIdleConnections()
	for _, path := range []string{"/", "/admin", "/healthz"} { // the proxy's home, the master's dashboard and health
		resp, err := c.Get("https://" + m.PublicAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 500 || resp.Header.Get("Strict-Transport-Security") == "" {
			t.Errorf("GET %s: %s, HSTS %q", path, resp.Status, resp.Header.Get("Strict-Transport-Security"))
		}
	}

	addrs := masterAddrs(m)
	if addrs["redirect"] == "" {
		t.Fatalf("no redirect address in %v", addrs)
	}
	resp, err := c.Get("http://" + addrs["redirect"] + "/hello?x=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := "https://" + m.PublicAddr() + "/hello?x=1"
	if resp.StatusCode != http.StatusPermanentRedirect || resp.Header.Get("Location") != want {
		t.Errorf("redirect: %s %q, want 308 %q", resp.Status, resp.Header.Get("Location"), want)
	}
}

// TestProxyProcsTLSArgs: the master's proxy processes get the pair's
// absolute paths and the trusted proxies; the redirect stays with the
// master.
func TestProxyProcsTLSArgs(t *testing.T) {
	ca := tlstest.NewCA(t)
	cert, key := ca.Issue(t).Write(t, t.TempDir())
	store, err := tlsfront.New(tlsfront.Files{Cert: cert, Key: key}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	m, err := master.New(master.Config{Secret: frontSecret, AdminToken: "admintok", Proxies: 1, ProxyCommand: []string{"/bin/true"},
		Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	ft := frontTLS{store: store, redirect: ":80"}
	ft.trusted, _ = parseTrusted("10.0.0.0/8,192.168.0.1")
	f := newFrontTLS(m, ft).(*redirectFront).Front.(*proxyProcs)
	args := f.args(1, "127.0.0.1:8443")
	for _, want := range [][]string{{"--tls-cert", cert}, {"--tls-key", key}, {"--trusted-proxies", "10.0.0.0/8,192.168.0.1/32"}} {
		if i := slices.Index(args, want[0]); i < 0 || args[i+1] != want[1] {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if slices.Contains(args, "--https-redirect") {
		t.Errorf("args %q pass the redirect on", args)
	}
}

func parseTrusted(s string) ([]netip.Prefix, error) { return httpsec.ParsePrefixes([]string{s}) }
