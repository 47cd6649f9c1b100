// Package tlsfront is the TLS side of the public listener (--tls-cert,
// --tls-key): the certificate in use, swapped without a restart, and the
// server configuration the proxies serve with.
//
// The pair in use sits behind an atomic pointer that
// tls.Config.GetCertificate reads on every handshake, so a reload changes
// what new connections see and leaves established ones alone (TLS needs
// the certificate only during the handshake). A reload is asked for by
// SIGHUP or noticed by polling the files (Watch); a new pair that does not
// load or does not match keeps the old one, with an error naming the file.
package tlsfront

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	stdlog "log"
	"math/big"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// Files names a certificate chain (PEM, leaf first) and its private key.
type Files struct{ Cert, Key string }

// FileError is a pair that cannot be used, blamed on one of its files.
type FileError struct {
	// Key: the key file is at fault (or the pair, if the key does not
	// belong to the certificate); else the certificate file.
	Key  bool
	Path string
	Err  error
}

func (e *FileError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *FileError) Unwrap() error { return e.Err }

// Load reads and checks a pair: the certificate file must hold a parsable
// chain and the key file the private key of its first certificate.
func Load(f Files) (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(f.Cert)
	if err != nil {
		return nil, &FileError{Path: f.Cert, Err: err}
	}
	keyPEM, err := os.ReadFile(f.Key)
	if err != nil {
		return nil, &FileError{Key: true, Path: f.Key, Err: err}
	}
	leaf, err := firstCert(certPEM)
	if err != nil {
		return nil, &FileError{Path: f.Cert, Err: err}
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// The chain parsed: what is wrong is the key, or that it is not
		// this certificate's.
		return nil, &FileError{Key: true, Path: f.Key, Err: fmt.Errorf("%w (certificate %s)", err, f.Cert)}
	}
	pair.Leaf = leaf
	return &pair, nil
}

// firstCert parses the first CERTIFICATE block: tls.X509KeyPair's own
// errors do not tell a bad certificate from a bad key.
func firstCert(b []byte) (*x509.Certificate, error) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, errors.New("no PEM CERTIFICATE block")
		}
		if blk.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("certificate: %w", err)
			}
			return c, nil
		}
	}
}

// Store holds the pair in use and reloads it.
type Store struct {
	files Files
	log   zerolog.Logger

	cur atomic.Pointer[tls.Certificate]

	mu   sync.Mutex // one reload at a time
	seen [2]stamp   // of the files at the last reload, good or bad
}

// New loads f (a *FileError if it cannot be used) into a Store.
func New(f Files, log zerolog.Logger) (*Store, error) {
	s := &Store{files: f, log: log.With().Str("component", "tls").Logger()}
	st := stamps(f)
	c, err := Load(f)
	if err != nil {
		return nil, err
	}
	s.cur.Store(c)
	s.seen = st
	s.describe(s.log.Info(), c).Msg("tls certificate loaded")
	return s, nil
}

// Files are the store's files.
func (s *Store) Files() Files { return s.files }

// Certificate is the pair in use.
func (s *Store) Certificate() *tls.Certificate { return s.cur.Load() }

// Serial is the serial number of the certificate in use.
func (s *Store) Serial() *big.Int { return s.cur.Load().Leaf.SerialNumber }

func (s *Store) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.cur.Load(), nil
}

// ServerConfig is the public listener's TLS configuration: the store's
// certificate and HTTP/1.1 only. HTTP/2 is not offered: the engine's
// WebSockets need HTTP/1.1 (the proxy hijacks the connection), its pages
// are a few requests per user, and one protocol keeps the proxy's
// behaviour and its measurements those of the plain-text port.
func (s *Store) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"http/1.1"},
		GetCertificate: s.getCertificate,
	}
}

// Reload loads the files again. A pair that cannot be used keeps the one
// in use; the error names the file and is logged.
func (s *Store) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reloadLocked(stamps(s.files))
}

func (s *Store) reloadLocked(st [2]stamp) error {
	s.seen = st
	c, err := Load(s.files)
	if err != nil {
		old := s.cur.Load()
		s.describe(s.log.Error(), old).Err(err).Str("file", fileOf(err)).
			Msg("tls certificate reload failed: still serving the previous one")
		return err
	}
	s.cur.Store(c)
	s.describe(s.log.Info(), c).Msg("tls certificate reloaded")
	return nil
}

// changed reloads if either file changed since the last reload.
func (s *Store) changed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := stamps(s.files); st != s.seen {
		_ = s.reloadLocked(st)
	}
}

// Watch reloads on SIGHUP and when either file changes (checked every
// poll), until ctx ends. Polling, not inotify: it sees a file replaced by
// rename or through a symlink swap (certbot, Kubernetes secrets) alike,
// and a pair written in two steps only loads once both are in place (a
// bad half logs an error; the second write reloads again).
func (s *Store) Watch(ctx context.Context, poll time.Duration) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			s.log.Info().Msg("SIGHUP: reloading the tls certificate")
			_ = s.Reload()
		case <-t.C:
			s.changed()
		}
	}
}

func (s *Store) describe(ev *zerolog.Event, c *tls.Certificate) *zerolog.Event {
	ev = ev.Str("cert", s.files.Cert).Str("key", s.files.Key)
	if c != nil && c.Leaf != nil {
		ev = ev.Str("subject", c.Leaf.Subject.String()).Str("serial", c.Leaf.SerialNumber.Text(16)).
			Time("not_after", c.Leaf.NotAfter)
		if time.Now().After(c.Leaf.NotAfter) {
			ev = ev.Bool("expired", true)
		}
	}
	return ev
}

func fileOf(err error) string {
	var fe *FileError
	if errors.As(err, &fe) {
		return fe.Path
	}
	return ""
}

// stamp is what tells a file changed.
type stamp struct {
	mod, size int64 // mtime in ns
	ino       uint64
}

func stamps(f Files) [2]stamp { return [2]stamp{stampOf(f.Cert), stampOf(f.Key)} }

func stampOf(path string) stamp {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{}
	}
	st := stamp{mod: fi.ModTime().UnixNano(), size: fi.Size()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = sys.Ino
	}
	return st
}

// ErrorLog is an http.Server's ErrorLog for a TLS listener: failed
// handshakes (scanners, plain-HTTP clients, the proxies' own port probes,
// browsers that distrust the certificate) at debug level, anything else
// as a warning.
func ErrorLog(log zerolog.Logger) *stdlog.Logger {
	return stdlog.New(serverLog{log}, "", 0)
}

type serverLog struct{ log zerolog.Logger }

func (s serverLog) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	ev := s.log.Warn()
	if strings.Contains(msg, "TLS handshake error") {
		ev = s.log.Debug()
	}
	ev.Str("server", "public").Msg(msg)
	return len(p), nil
}
