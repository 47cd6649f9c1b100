package tlsfront

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/tlsfront/tlstest"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// TestLoadBlamesTheFile: every way a pair can be unusable names the file
// at fault.
func TestLoadBlamesTheFile(t *testing.T) {
	ca := tlstest.NewCA(t)
	dir := t.TempDir()
	good := ca.Issue(t)
	other := ca.Issue(t)
	cert, key := good.Write(t, dir)
	otherKey := filepath.Join(dir, "other.key")
	tlstest.WriteFile(t, otherKey, other.KeyPEM)
	garbage := filepath.Join(dir, "garbage.pem")
	tlstest.WriteFile(t, garbage, []byte("not a pem file\n"))
	badCert := filepath.Join(dir, "bad.crt")
	tlstest.WriteFile(t, badCert, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	missing := filepath.Join(dir, "missing.pem")

	if c, err := Load(Files{Cert: cert, Key: key}); err != nil || c.Leaf.SerialNumber.Cmp(good.Serial) != 0 {
		t.Fatalf("good pair: %v", err)
	}
	for _, tc := range []struct {
		name    string
		f       Files
		keyFile bool
		path    string
	}{
		{"no certificate file", Files{Cert: missing, Key: key}, false, missing},
		{"no key file", Files{Cert: cert, Key: missing}, true, missing},
		{"certificate not PEM", Files{Cert: garbage, Key: key}, false, garbage},
		{"certificate does not parse", Files{Cert: badCert, Key: key}, false, badCert},
		{"key not PEM", Files{Cert: cert, Key: garbage}, true, garbage},
		{"key of another certificate", Files{Cert: cert, Key: otherKey}, true, otherKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.f)
			var fe *FileError
			if !errors.As(err, &fe) || fe.Key != tc.keyFile || fe.Path != tc.path || !strings.Contains(err.Error(), tc.path) {
				t.Fatalf("error %v (%#v), want one blaming %s (key file: %v)", err, fe, tc.path, tc.keyFile)
			}
		})
	}
}

// serveTLS serves s's configuration on loopback with a handler that
// answers "ok".
func serveTLS(t *testing.T, s *Store) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }),
		ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(tls.NewListener(ln, s.ServerConfig())) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return ln.Addr().String()
}

// serialAt is the serial of the certificate a new connection to addr gets.
func serialAt(t *testing.T, ca *tlstest.CA, addr string) *big.Int {
	t.Helper()
	c, err := tls.Dial("tcp", addr, ca.ClientConfig())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

func get(c *http.Client, url string) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || string(b) != "ok" {
		return fmt.Errorf("body %q, %v", b, err)
	}
	return nil
}

// TestReload: a bad new pair keeps the one in use (the error names the
// file); a good one is used by new connections, and a connection opened
// before goes on.
func TestReload(t *testing.T) {
	ca := tlstest.NewCA(t)
	dir := t.TempDir()
	first, second := ca.Issue(t), ca.Issue(t)
	cert, key := first.Write(t, dir)
	s, err := New(Files{Cert: cert, Key: key}, testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, s)
	tr := &http.Transport{TLSClientConfig: ca.ClientConfig(), MaxConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	kept := &http.Client{Transport: tr}
	if err := get(kept, "https://"+addr+"/"); err != nil {
		t.Fatal(err)
	}

	// The new certificate is written, but with the old key: refused.
	tlstest.WriteFile(t, cert, second.CertPEM)
	err = s.Reload()
	var fe *FileError
	if !errors.As(err, &fe) || fe.Path != key {
		t.Fatalf("reload of a mismatched pair: %v, want an error naming %s", err, key)
	}
	if got := serialAt(t, ca, addr); got.Cmp(first.Serial) != 0 {
		t.Fatalf("after a failed reload: serial %v, want the first %v", got, first.Serial)
	}
	tlstest.WriteFile(t, key, second.KeyPEM)
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := serialAt(t, ca, addr); got.Cmp(second.Serial) != 0 {
		t.Fatalf("after the reload: serial %v, want the second %v", got, second.Serial)
	}
	if s.Serial().Cmp(second.Serial) != 0 {
		t.Errorf("Serial() = %v", s.Serial())
	}
	if err := get(kept, "https://"+addr+"/"); err != nil {
		t.Fatalf("the connection opened before the reload: %v", err)
	}
}

// TestWatch: a changed pair is picked up by polling, and by SIGHUP
// between polls.
func TestWatch(t *testing.T) {
	ca := tlstest.NewCA(t)
	dir := t.TempDir()
	first, second, third := ca.Issue(t), ca.Issue(t), ca.Issue(t)
	cert, key := first.Write(t, dir)
	s, err := New(Files{Cert: cert, Key: key}, testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	// Our own subscription first: a SIGHUP that came before Watch's would
	// end the test binary.
	mine := make(chan os.Signal, 8)
	signal.Notify(mine, syscall.SIGHUP)
	defer signal.Stop(mine)

	watch := func(poll time.Duration) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); s.Watch(ctx, poll) }()
		return func() { cancel(); <-done }
	}

	stop := watch(20 * time.Millisecond)
	second.Write(t, dir)
	testutil.Eventually(t, 10*time.Second, func() error {
		if got := s.Serial(); got.Cmp(second.Serial) != 0 {
			return fmt.Errorf("serial %v, want %v (polling)", got, second.Serial)
		}
		return nil
	})
	stop()

	// SIGHUP alone: a watch that never polls in this test's time.
	stop = watch(time.Hour)
	defer stop()
	third.Write(t, dir)
	testutil.Eventually(t, 10*time.Second, func() error {
		_ = syscall.Kill(os.Getpid(), syscall.SIGHUP)
		if got := s.Serial(); got.Cmp(third.Serial) != 0 {
			return fmt.Errorf("serial %v, want %v (SIGHUP)", got, third.Serial)
		}
		return nil
	})
}
