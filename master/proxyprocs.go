package master

import (
	"context"
	"fmt"
	"net"
	"slices"

	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/procfs"
	"github.com/cloudbrowser-go/cloudbrowser/internal/reserve"
	"github.com/cloudbrowser-go/cloudbrowser/internal/secret"
	"github.com/cloudbrowser-go/cloudbrowser/internal/supervise"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
	"github.com/cloudbrowser-go/cloudbrowser/proxy"
)

// The Reverse Proxy Manager's processes outlive the master: a master that
// crashes (kill -9) leaves its proxies serving open sockets and cached
// routes, and the next master on the same data directory adopts them
// instead of starting duplicates. Each proxy's identity (pid and start
// time) and command line are kept in state.db; a clean stop stops the
// proxies and forgets them.

// bucketProxies holds one proxyRecord per proxy name.
const bucketProxies = "proxies"

type proxyRecord struct {
	Name string       `json:"name"`
	ID   supervise.ID `json:"id"`
	Args []string     `json:"args"` // argv, with the executable first
}

// portKey is what proxies prove their cluster with on the public port.
func portKey(clusterSecret string) []byte { return secret.Derive(clusterSecret, "public-port", 32) }

// proxyArgs is the command line of proxy number i (1-based).
func (m *Master) proxyArgs(i int) []string {
	keyFile := m.RoleKeyFile(secret.RoleProxy)
	if keyFile == "" {
		keyFile = m.cfg.SecretFile // no data dir: the cluster secret, role still declared
	}
	args := append(append([]string{}, m.cfg.ProxyCommand[1:]...),
		"--master", m.RMIAddr(), "--listen", m.publicAddr, "--secret-file", keyFile,
		"--name", fmt.Sprintf("proxy-%d", i))
	if m.cfg.PublicURL != "" {
		args = append(args, "--public-url", m.cfg.PublicURL)
	}
	if m.cfg.TrustForwardedProto {
		args = append(args, "--trust-forwarded-proto")
	}
	return args
}

// startProxyProcs starts (or adopts) cfg.Proxies proxy processes after
// checking that the public port is free or served by this cluster.
func (m *Master) startProxyProcs(ctx context.Context) error {
	m.publicAddr = m.cfg.PublicAddr
	if _, port, err := net.SplitHostPort(m.cfg.PublicAddr); err == nil && port == "0" {
		// Any port: hold one for this cluster's proxies and tell them which.
		hold, err := reserve.Bind(m.cfg.PublicAddr)
		if err != nil {
			return fmt.Errorf("master: %w", config.Errorf("PublicAddr", "%s: %w", m.cfg.PublicAddr, err))
		}
		m.publicHold, m.publicAddr = hold, hold.Addr()
	} else if err := proxy.ProbePort(ctx, m.cfg.PublicAddr, m.portKey); err != nil {
		return fmt.Errorf("master: %w", config.Errorf("PublicAddr", "%s: %w", m.cfg.PublicAddr, err))
	}
	// Only a durable record lets a later master adopt a proxy; without a
	// data directory, proxies die with the master as before.
	detach := m.cfg.DataDir != ""
	records := map[string]proxyRecord{}
	if detach {
		if err := eachRecord(m, func(r proxyRecord) { records[r.Name] = r }); err != nil {
			m.log.Warn().Err(err).Msg("proxy records unreadable; starting new proxies")
		}
	}
	for i := 1; i <= m.cfg.Proxies; i++ {
		name := fmt.Sprintf("proxy-%d", i)
		spec := supervise.Spec{
			Name: name, Path: m.cfg.ProxyCommand[0], Args: m.proxyArgs(i),
			Stdout: m.cfg.ChildOutput, Stderr: m.cfg.ChildOutput, Detach: detach,
		}
		argv := append([]string{spec.Path}, spec.Args...)
		if detach {
			spec.OnStart = func(id supervise.ID) {
				if err := m.state.Put(bucketProxies, name, proxyRecord{Name: name, ID: id, Args: argv}); err != nil {
					m.log.Error().Err(err).Str("proxy", name).Msg("recording proxy process failed; a crash of the master would orphan it")
				}
			}
		}
		rec, ok := records[name]
		delete(records, name)
		if ok && rec.ID.Running() {
			if live, err := procfs.Cmdline(rec.ID.Pid); err == nil && slices.Equal(live, argv) {
				m.log.Info().Str("proxy", name).Int("pid", rec.ID.Pid).Msg("adopting the proxy a previous master started")
				m.children = append(m.children, supervise.Adopt(m.ctx, m.log, spec, rec.ID))
				continue
			}
			m.log.Info().Str("proxy", name).Int("pid", rec.ID.Pid).Msg("stopping a previous master's proxy started with other arguments")
			supervise.Stop(rec.ID, spec.StopTimeout, m.log)
		}
		m.children = append(m.children, supervise.Start(m.ctx, m.log, spec))
	}
	for name, rec := range records { // proxies beyond today's --proxies
		m.log.Info().Str("proxy", name).Int("pid", rec.ID.Pid).Msg("stopping a previous master's extra proxy")
		supervise.Stop(rec.ID, 0, m.log)
		_ = m.state.Delete(bucketProxies, name)
	}
	return nil
}

func eachRecord(m *Master, fn func(proxyRecord)) error {
	return state.Each(m.state, bucketProxies, func(_ string, r proxyRecord) { fn(r) })
}

// forgetProxies drops the records after a clean stop: the proxies are gone.
func (m *Master) forgetProxies() {
	if m.cfg.Proxies > 0 && m.cfg.DataDir != "" {
		if err := m.state.DropBucket(bucketProxies); err != nil {
			m.log.Warn().Err(err).Msg("forgetting proxy records")
		}
	}
}
