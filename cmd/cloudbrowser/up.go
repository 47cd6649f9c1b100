package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/cloudbrowser-go/cloudbrowser/internal/supervise"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master"
)

func upCmd() *cli.Command {
	flags := masterFlags()
	// up pins the internal addresses (any free loopback port) and exposes
	// only the public one.
	for i, f := range flags {
		if sf, ok := f.(*cli.StringFlag); ok && sf.Name == "listen" {
			c := *sf
			c.Value = "127.0.0.1:8080"
			c.Usage = "public address: the URL to open (use :8080 to accept other machines)"
			flags[i] = &c
		}
	}
	flags = append(flags,
		&cli.IntFlag{Name: "workers", Value: 2, Sources: cli.EnvVars("CB_WORKERS"), Usage: "number of local worker processes"},
		&cli.StringFlag{Name: "runtime", Value: "chromium", Sources: cli.EnvVars("CB_RUNTIME"), Usage: `virtual browser runtime of the workers: chromium or none`},
	)
	return &cli.Command{
		Name:  "up",
		Usage: "run a whole cluster on this machine: master, proxy and workers, with the sample apps",
		Description: `up starts a master with its reverse proxy on --listen, N worker processes (restarted
if they die) and deploys the sample applications, then prints the URL to open.
The admin API, /healthz and /metrics are on the same address.`,
		Flags: flags,
		Action: func(ctx context.Context, cmd *cli.Command) error {
			log, err := logger(cmd)
			if err != nil {
				return err
			}
			n := int(cmd.Int("workers"))
			if n < 1 {
				return fmt.Errorf("--workers must be at least 1, got %d", n)
			}
			anyPort := "127.0.0.1:0"
			none := ""
			m, err := newMaster(ctx, cmd, log, masterOverrides{rmi: &anyPort, gossip: &anyPort, admin: &none})
			if err != nil {
				return err
			}
			if err := m.Start(ctx); err != nil {
				m.Close()
				return err
			}
			exe, err := os.Executable()
			if err != nil {
				m.Close()
				return err
			}
			// Each local worker proves its own id (it is restarted under the
			// same one), not just the shared worker key.
			keyFiles := make([]string, n)
			for i := range n {
				if keyFiles[i], err = m.WriteWorkerKey("w-local" + strconv.Itoa(i+1)); err != nil {
					m.Close()
					return err
				}
			}
			wctx, stopWorkers := context.WithCancel(context.Background())
			var procs []*supervise.Process
			for i := range n {
				id, keyFile := "w-local"+strconv.Itoa(i+1), keyFiles[i]
				args := append(logArgs(cmd), "worker", "--master", m.RMIAddr(), "--secret-file", keyFile,
					"--runtime", cmd.String("runtime"), "--id", id)
				procs = append(procs, supervise.Start(wctx, log, supervise.Spec{
					Name: "worker-" + strconv.Itoa(i+1), Path: exe, Args: args, Stdout: os.Stderr, Stderr: os.Stderr,
				}))
			}
			url := map[bool]string{false: "http://", true: "https://"}[cmd.String("tls-cert") != ""] + publicURLHost(cmd.String("listen"), m.PublicAddr()) + "/"
			// Say "running" only when an Application URL can be served: a
			// worker registered and every proxy subscribed (until then the
			// proxies show a self-reloading "starting" page).
			if !waitServing(ctx, m, int(cmd.Int("proxies")), 2*time.Minute) && ctx.Err() == nil {
				fmt.Fprintln(os.Stderr, "cloudbrowser: no worker registered within 2 minutes; see the log above (is Chromium installed?)")
			}
			if err := writeReady(cmd, "up", masterAddrs(m)); err != nil {
				log.Error().Err(err).Msg("writing the ready file")
			}
			fmt.Fprintf(os.Stdout, "\nCloudBrowser is running: open %s\n  admin token: %s\n  status:      cloudbrowser status --master %s\n  stop:        Ctrl-C\n\n",
				url, filepath.Join(cmd.String("data-dir"), "admin.token"), url)
			<-ctx.Done()
			log.Info().Msg("stopping")
			m.BeginShutdown()
			stopWorkers()
			for _, p := range procs {
				<-p.Done()
			}
			return m.Close()
		},
	}
}

// publicURLHost turns the listen address into something a browser can open.
func publicURLHost(listen, bound string) string {
	addr := bound
	if addr == "" {
		addr = listen
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1" // a wildcard listener is reachable on loopback
	}
	return net.JoinHostPort(host, port)
}

// waitServing waits until the cluster can serve an Application URL: at
// least one connected worker and every proxy process subscribed.
func waitServing(ctx context.Context, m *master.Master, proxies int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if servingNow(m.Status(), proxies) {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// servingNow: a connected worker, and the proxies (or the embedded one).
func servingNow(st wire.ClusterStatus, proxies int) bool {
	workers := 0
	for _, w := range st.Workers {
		if w.State == "connected" && !w.Draining {
			workers++
		}
	}
	return workers > 0 && len(st.Proxies) >= max(proxies, 1)
}
