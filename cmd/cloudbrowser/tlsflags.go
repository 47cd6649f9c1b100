package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v3"

	"github.com/cloudbrowser-go/cloudbrowser/internal/httpsec"
	"github.com/cloudbrowser-go/cloudbrowser/internal/tlsfront"
	"github.com/cloudbrowser-go/cloudbrowser/master"
)

// HTTPS on the public listener (docs/deploying.md, "TLS"): the flags of
// the master (and up) and of proxy processes, and what they set up.

// tlsPoll is how often the certificate files are checked for a change.
const tlsPoll = 2 * time.Second

func tlsFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "tls-cert", Sources: cli.EnvVars("CB_TLS_CERT"),
			Usage: "serve HTTPS on the public listener with this certificate chain (PEM, leaf first); reloaded on SIGHUP and when the file changes"},
		&cli.StringFlag{Name: "tls-key", Sources: cli.EnvVars("CB_TLS_KEY"),
			Usage: "the private key of --tls-cert (PEM)"},
		&cli.StringFlag{Name: "https-redirect", Sources: cli.EnvVars("CB_HTTPS_REDIRECT"),
			Usage: "also listen for plain HTTP on this address (e.g. :80) and redirect every request to https (308, same host and path)"},
		&cli.StringSliceFlag{Name: "trusted-proxies", Sources: cli.EnvVars("CB_TRUSTED_PROXIES"),
			Usage: "load balancers (CIDRs or addresses; repeat the flag or separate with commas) whose X-Forwarded-For and X-Forwarded-Proto are believed; anyone else's are replaced"},
	}
}

// frontTLS is what the flags configure.
type frontTLS struct {
	store     *tlsfront.Store // nil: plain HTTP
	redirect  string          // --https-redirect ("" = none)
	publicURL string          // --public-url: the redirect's target when https
	trusted   []netip.Prefix  // --trusted-proxies
	log       zerolog.Logger
}

// frontTLSOf reads the flags. A pair that cannot be used is an error
// naming the flag and the file.
func frontTLSOf(cmd *cli.Command, log zerolog.Logger) (frontTLS, error) {
	ft := frontTLS{redirect: cmd.String("https-redirect"), publicURL: cmd.String("public-url"), log: log}
	var err error
	if ft.trusted, err = httpsec.ParsePrefixes(cmd.StringSlice("trusted-proxies")); err != nil {
		return ft, fmt.Errorf("--trusted-proxies: %w", err)
	}
	cert, key := cmd.String("tls-cert"), cmd.String("tls-key")
	switch {
	case cert == "" && key != "":
		return ft, errors.New("--tls-cert: required with --tls-key")
	case cert != "" && key == "":
		return ft, errors.New("--tls-key: required with --tls-cert")
	case cert != "":
		// Absolute: proxy processes get the paths, and a reload must read
		// the same files whatever the working directory.
		files := tlsfront.Files{Cert: absPath(cert), Key: absPath(key)}
		if ft.store, err = tlsfront.New(files, log); err != nil {
			flag := "--tls-cert"
			if fe := (*tlsfront.FileError)(nil); errors.As(err, &fe) && fe.Key {
				flag = "--tls-key"
			}
			return ft, fmt.Errorf("%s %w", flag, err)
		}
	}
	if ft.redirect != "" && ft.store == nil {
		if https, _ := httpsec.PublicHTTPS(ft.publicURL); !https {
			return ft, errors.New("--https-redirect: needs --tls-cert (or an https --public-url, TLS ending at a load balancer)")
		}
	}
	return ft, nil
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// on: the public listener serves TLS.
func (ft frontTLS) on() bool { return ft.store != nil }

// watch reloads the certificate on SIGHUP and file changes until ctx
// ends; done is closed then.
func (ft frontTLS) watch(ctx context.Context) (done <-chan struct{}) {
	ch := make(chan struct{})
	if !ft.on() {
		close(ch)
		return ch
	}
	go func() {
		defer close(ch)
		ft.store.Watch(ctx, tlsPoll)
	}()
	return ch
}

// childArgs pass the flags on to the master's proxy processes (the
// redirect listener stays in the master: one per host is enough).
func (ft frontTLS) childArgs() []string {
	var args []string
	if ft.on() {
		f := ft.store.Files()
		args = append(args, "--tls-cert", f.Cert, "--tls-key", f.Key)
	}
	if len(ft.trusted) > 0 {
		s := make([]string, len(ft.trusted))
		for i, p := range ft.trusted {
			s[i] = p.String()
		}
		args = append(args, "--trusted-proxies", strings.Join(s, ","))
	}
	return args
}

// forwardHUP passes SIGHUP on to the master's proxy processes (each
// reloads its certificate) until ctx ends.
func forwardHUP(ctx context.Context, pids func() []int, log zerolog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			n := 0
			for _, pid := range pids() {
				if pid > 0 && syscall.Kill(pid, syscall.SIGHUP) == nil {
					n++
				}
			}
			log.Info().Int("proxies", n).Msg("SIGHUP passed on to the proxy processes: they reload their tls certificate")
		}
	}
}

// startRedirect binds --https-redirect (if given) before the public
// listener, so a bad address fails the start; its port is set once the
// public listener is bound (setPort).
func (ft frontTLS) startRedirect(ctx context.Context) (*tlsfront.RedirectServer, *tlsfront.Redirect, error) {
	if ft.redirect == "" {
		return nil, nil, nil
	}
	rd := tlsfront.NewRedirect(ft.publicURL)
	srv, err := tlsfront.ListenRedirect(ctx, ft.redirect, rd, ft.log)
	if err != nil {
		return nil, nil, fmt.Errorf("--https-redirect %s: %w", ft.redirect, err)
	}
	return srv, rd, nil
}

// setPort tells rd the public listener's port.
func setPort(rd *tlsfront.Redirect, publicAddr string) {
	if _, port, err := net.SplitHostPort(publicAddr); err == nil {
		rd.SetPort(port)
	}
}

// redirectFront is a master's public side with the redirect listener.
type redirectFront struct {
	master.Front
	m   *master.Master
	ft  frontTLS
	srv *tlsfront.RedirectServer
}

func (f *redirectFront) Start(ctx context.Context) (string, error) {
	srv, rd, err := f.ft.startRedirect(ctx)
	if err != nil {
		return "", fmt.Errorf("master: %w", err)
	}
	addr, err := f.Front.Start(ctx)
	if err != nil {
		srv.Close(ctx)
		return "", err
	}
	setPort(rd, addr)
	f.srv = srv
	frontAddrs.Store(f.m, map[string]string{"redirect": srv.Addr()})
	return addr, nil
}

func (f *redirectFront) Stop(ctx context.Context) {
	if f.srv != nil {
		f.srv.Close(ctx)
	}
	f.Front.Stop(ctx)
}

// frontAddrs are the addresses a master's front bound beyond the master's
// own (the redirect listener), for its --ready-file.
var frontAddrs sync.Map // *master.Master -> map[string]string

// withFrontAddrs adds m's front addresses to addrs.
func withFrontAddrs(m *master.Master, addrs map[string]string) map[string]string {
	if extra, ok := frontAddrs.Load(m); ok {
		for k, v := range extra.(map[string]string) {
			addrs[k] = v
		}
	}
	return addrs
}
