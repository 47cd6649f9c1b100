package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v3"

	"github.com/cloudbrowser-go/cloudbrowser/internal/httpsec"
	"github.com/cloudbrowser-go/cloudbrowser/internal/metrics"
	"github.com/cloudbrowser-go/cloudbrowser/proxy"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// proxyDefaults are the proxy flags' defaults.
var proxyDefaults = proxy.DefaultProcessConfig()

func proxyCmd() *cli.Command {
	return &cli.Command{
		Name:  "proxy",
		Usage: "run a reverse proxy that routes end users' requests to workers",
		Description: `A proxy asks the master where each request goes (caching instance routes, which the
master invalidates) and forwards it; WebSockets are relayed as raw bytes after the
handshake. Several proxies of one cluster can share one --listen port (SO_REUSEPORT):
before binding, a proxy asks whoever serves the port to prove it is of the same
cluster, and refuses to start otherwise.`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "master", Value: proxyDefaults.Master, Sources: cli.EnvVars("CB_MASTER"),
				Usage: "the master's RMI address"},
			&cli.StringFlag{Name: "listen", Value: proxyDefaults.Listen, Sources: cli.EnvVars("CB_LISTEN"),
				Usage: "public address"},
			secretFileFlag,
			&cli.StringFlag{Name: "name", Sources: cli.EnvVars("CB_PROXY_NAME"),
				Usage: "proxy name in logs and status (default: proxy-<pid>)"},
			&cli.StringFlag{Name: "admin", Sources: cli.EnvVars("CB_PROXY_ADMIN"),
				Usage: `address for /metrics, /healthz and /readyz of this proxy ("" = none; each proxy needs its own)`},
			&cli.DurationFlag{Name: "route-ttl", Value: proxyDefaults.RouteTTL, Sources: cli.EnvVars("CB_ROUTE_TTL"),
				Usage: "how long instance routes are cached"},
			publicURLFlag(), trustForwardedProtoFlag(),
		}, append(memberFlags(), tlsFlags()...)...),
		Action: withSecret(func(ctx context.Context, cmd *cli.Command, log zerolog.Logger, sec string) error {
			// A proxy started by the master outlives it (docs/architecture.md);
			// its logs then go to a closed pipe or terminal, which must not
			// kill it (Go exits on SIGPIPE for stdout/stderr by default).
			signal.Ignore(syscall.SIGPIPE)
			name := cmd.String("name")
			if name == "" {
				name = "proxy-" + strconv.Itoa(os.Getpid())
			}
			publicHTTPS, err := httpsec.PublicHTTPS(cmd.String("public-url"))
			if err != nil {
				return fmt.Errorf("--public-url: %w", err)
			}
			// --listen is public (exempt from the address rule); the
			// gossip port is dialled by the other members.
			gossipAdv, err := gossipAdvertise(ctx, cmd, cmd.String("gossip"))
			if err != nil {
				return err
			}
			ft, err := frontTLSOf(cmd, log)
			if err != nil {
				return err
			}
			redirect, rd, err := ft.startRedirect(ctx)
			if err != nil {
				return err
			}
			if redirect != nil {
				defer redirect.Close(context.Background())
			}
			wctx, stopWatch := context.WithCancel(ctx)
			watched := ft.watch(wctx)
			defer func() { stopWatch(); <-watched }()
			var tlsCfg *tls.Config
			if ft.on() {
				tlsCfg = ft.store.ServerConfig()
			}
			return proxy.RunProcess(ctx, proxy.ProcessConfig{
				PublicHTTPS: publicHTTPS || ft.on(), TrustForwardedProto: cmd.Bool("trust-forwarded-proto"),
				TrustedProxies: ft.trusted, TLS: tlsCfg,
				Name: name, Master: cmd.String("master"), Listen: cmd.String("listen"), Secret: sec,
				GossipAddr: cmd.String("gossip"), GossipAdvertise: gossipAdv,
				RouteTTL: cmd.Duration("route-ttl"), Logger: log,
				AdminAddr: cmd.String("admin"), Admin: proxyAdmin,
				Ready: func(listen, admin string) {
					addrs := map[string]string{"public": listen, "admin": admin}
					if redirect != nil {
						setPort(rd, listen)
						addrs["redirect"] = redirect.Addr()
					}
					if err := writeReady(cmd, "proxy", addrs); err != nil {
						log.Error().Err(err).Msg("writing the ready file")
					}
				},
			})
		}),
	}
}

// proxyAdmin serves a proxy process's own endpoints.
func proxyAdmin(p *proxy.Proxy, cache *proxy.CachingRouter, node *rmi.Node, connected func() bool) http.Handler {
	reg := metrics.NewRegistry()
	reg.MustRegister(proxy.Collectors(p, cache)...)
	reg.MustRegister(metrics.RMI(node)...)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics.Handler(reg))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if !connected() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"status":"master not connected"}` + "\n"))
			return
		}
		_, _ = w.Write([]byte(`{"status":"ready"}` + "\n"))
	})
	return mux
}
