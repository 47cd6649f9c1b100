package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/procfs"
	"github.com/cloudbrowser-go/cloudbrowser/internal/reserve"
	"github.com/cloudbrowser-go/cloudbrowser/internal/supervise"
	"github.com/cloudbrowser-go/cloudbrowser/master"
	"github.com/cloudbrowser-go/cloudbrowser/proxy"
)

// proxyProcs is the Reverse Proxy Manager: --proxies N `cloudbrowser
// proxy` processes sharing the public port, restarted when they die.
//
// The processes outlive the master: a master that crashes (kill -9) leaves
// its proxies serving open sockets and cached routes, and the next master
// on the same data directory adopts them instead of starting duplicates.
// Each proxy's identity (pid and start time) and command line are kept in
// the master's ProxyTable; a clean stop stops the proxies and forgets them.
type proxyProcs struct {
	m   *master.Master
	set master.ProxySettings
	// tls: the HTTPS flags passed on to the processes (tlsflags.go).
	tls frontTLS

	// ctx is the processes' own, not Start's: they run until Stop, after
	// the command's context ended (a clean stop begins that way).
	ctx      context.Context
	cancel   context.CancelFunc
	children []*supervise.Process
	// hold keeps a port-0 public address ours while proxy processes come
	// and go (see internal/reserve).
	hold *reserve.Port
}

var _ master.Front = (*proxyProcs)(nil)

func newProxyProcs(m *master.Master, set master.ProxySettings) *proxyProcs {
	ctx, cancel := context.WithCancel(context.Background())
	return &proxyProcs{m: m, set: set, ctx: ctx, cancel: cancel}
}

// args is the command line of proxy number i (1-based) for a master whose
// proxies listen on publicAddr.
func (p *proxyProcs) args(i int, publicAddr string) []string {
	s := p.set
	args := append(append([]string{}, s.Command[1:]...),
		"--master", p.m.RMIAddr(), "--listen", publicAddr, "--secret-file", s.KeyFile,
		"--name", fmt.Sprintf("proxy-%d", i))
	args = append(args, childGossipArgs(p.m.GossipAddr())...)
	if s.PublicURL != "" {
		args = append(args, "--public-url", s.PublicURL)
	}
	if s.TrustForwardedProto {
		args = append(args, "--trust-forwarded-proto")
	}
	return append(args, p.tls.childArgs()...)
}

// Start starts (or adopts) the proxy processes after checking that the
// public port is free or served by this cluster.
func (p *proxyProcs) Start(ctx context.Context) (string, error) {
	s, log := p.set, p.set.Logger
	publicAddr := s.PublicAddr
	if _, port, err := net.SplitHostPort(s.PublicAddr); err == nil && port == "0" {
		// Any port: hold one for this cluster's proxies and tell them which.
		hold, err := reserve.Bind(s.PublicAddr)
		if err != nil {
			return "", fmt.Errorf("master: %w", config.Errorf("PublicAddr", "%s: %w", s.PublicAddr, err))
		}
		p.hold, publicAddr = hold, hold.Addr()
	} else if err := proxy.ProbePort(ctx, s.PublicAddr, s.PortKey); err != nil {
		return "", fmt.Errorf("master: %w", config.Errorf("PublicAddr", "%s: %w", s.PublicAddr, err))
	}
	// Only a durable record lets a later master adopt a proxy; without a
	// data directory, proxies die with the master.
	detach := s.Durable
	table := p.m.ProxyTable()
	records := map[string]master.ProxyRecord{}
	if detach {
		var err error
		if records, err = table.All(); err != nil {
			log.Warn().Err(err).Msg("proxy records unreadable; starting new proxies")
		}
	}
	for i := 1; i <= s.Proxies; i++ {
		name := fmt.Sprintf("proxy-%d", i)
		spec := supervise.Spec{
			Name: name, Path: s.Command[0], Args: p.args(i, publicAddr),
			Stdout: s.Output, Stderr: s.Output, Detach: detach,
		}
		argv := append([]string{spec.Path}, spec.Args...)
		if detach {
			spec.OnStart = func(id supervise.ID) {
				if err := table.Put(master.ProxyRecord{Name: name, ID: id, Args: argv}); err != nil {
					log.Error().Err(err).Str("proxy", name).Msg("recording proxy process failed; a crash of the master would orphan it")
				}
			}
		}
		rec, ok := records[name]
		delete(records, name)
		if ok && rec.ID.Running() {
			if live, err := procfs.Cmdline(rec.ID.Pid); err == nil && slices.Equal(live, argv) {
				log.Info().Str("proxy", name).Int("pid", rec.ID.Pid).Msg("adopting the proxy a previous master started")
				p.children = append(p.children, supervise.Adopt(p.ctx, log, spec, rec.ID))
				continue
			}
			log.Info().Str("proxy", name).Int("pid", rec.ID.Pid).Msg("stopping a previous master's proxy started with other arguments")
			supervise.Stop(rec.ID, spec.StopTimeout, log)
		}
		p.children = append(p.children, supervise.Start(p.ctx, log, spec))
	}
	for name, rec := range records { // proxies beyond today's --proxies
		log.Info().Str("proxy", name).Int("pid", rec.ID.Pid).Msg("stopping a previous master's extra proxy")
		supervise.Stop(rec.ID, 0, log)
		_ = table.Delete(name)
	}
	if p.tls.on() { // each process watches its files; SIGHUP to the master reaches them too
		go forwardHUP(p.ctx, p.pids, log)
	}
	return publicAddr, nil
}

// Stop stops the processes and forgets their records: they are gone. It
// waits for every process however long ctx is, since supervise bounds
// each stop itself and a proxy left running would hold the port.
func (p *proxyProcs) Stop(context.Context) {
	p.cancel()
	for _, c := range p.children {
		<-c.Done()
	}
	if p.set.Durable {
		if err := p.m.ProxyTable().Clear(); err != nil {
			p.set.Logger.Warn().Err(err).Msg("forgetting proxy records")
		}
	}
	if p.hold != nil {
		_ = p.hold.Close()
	}
}

// pids returns the pids of the proxy processes (0 = restarting).
func (p *proxyProcs) pids() []int {
	out := make([]int, len(p.children))
	for i, c := range p.children {
		out[i] = c.Pid()
	}
	return out
}

// childGossipArgs are the gossip flags of the master's proxy processes:
// the other members must reach them too (the one address rule), so unless
// the master gossips on loopback they bind every interface and advertise
// the master's own gossip address (the same host: masterGossip).
func childGossipArgs(masterGossip string) []string {
	host, _, err := net.SplitHostPort(masterGossip)
	ip, perr := netip.ParseAddr(host)
	if err != nil || perr != nil || ip.IsLoopback() {
		return nil // the default, loopback, is right
	}
	bind := "0.0.0.0:0"
	if !ip.Unmap().Is4() {
		bind = "[::]:0"
	}
	return []string{"--gossip", bind, "--gossip-advertise", ip.Unmap().String()}
}
