// Package reach checks that the master can reach each worker at the HTTP
// address the worker advertised (wire.WorkerInfo.HTTPAddr), the address
// every proxy dials. A worker registers over its own outgoing RMI
// connection, so it is alive for the master even when nobody can dial the
// address it gave (a wrong --advertise, a firewall, a NAT): without this
// probe its users would only see failing requests. The result goes with the
// worker's status (wire.WorkerStatus.Reach, the dashboard and `cloudbrowser
// status`) and every change is logged.
package reach

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/registry"
)

// States of wire.WorkerStatus.Reach ("" = not probed yet).
const (
	StateReachable   = "reachable"
	StateUnreachable = "unreachable"
)

// Defaults of Config.
const (
	DefaultScan    = 2 * time.Second
	DefaultEvery   = 30 * time.Second
	DefaultTimeout = 5 * time.Second
)

// Config configures a Prober.
type Config struct {
	// Workers lists the connected workers (registry.Registry.Views).
	Workers func() []registry.WorkerView
	// Scan is how often Workers is read for workers not probed yet (a new
	// worker, address or incarnation); Every how often each one is probed
	// again; Timeout bounds one probe.
	Scan, Every, Timeout time.Duration
	// Client sends the probes (default: no proxy from the environment, no
	// keep-alive, no redirects).
	Client *http.Client
	// Clock stamps results and decides when a probe is due again (default
	// clock.Real). The master passes clock.Real: probes are network I/O in
	// real time, and its tests count the timers on its fake clock.
	Clock  clock.Clock
	Logger zerolog.Logger
}

// Result is the outcome of the last probe of a worker.
type Result struct {
	State string
	Error string
	At    time.Time
}

// Prober probes the workers' advertised addresses until its Run ends.
type Prober struct {
	cfg  Config
	kick chan struct{}

	mu      sync.Mutex
	entries map[string]*entry // by worker id
}

// entry is what is known of one worker: the address probed last (target)
// and the outcome, which applies to that address only.
type entry struct {
	target  target
	res     Result
	probing bool
	// last is the state of the last probe, whatever its address: a
	// change is logged.
	last string
}

type target struct{ id, incarnation, addr string }

// New returns a Prober; Run starts it.
func New(cfg Config) *Prober {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.Scan, DefaultScan)
	def(&cfg.Every, DefaultEvery)
	def(&cfg.Timeout, DefaultTimeout)
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{
			Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true,
				DialContext: (&net.Dialer{}).DialContext, ResponseHeaderTimeout: cfg.Timeout},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return &Prober{cfg: cfg, kick: make(chan struct{}, 1), entries: map[string]*entry{}}
}

// Run probes until ctx ends, then waits for the probes in flight.
func (p *Prober) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	t := time.NewTicker(p.cfg.Scan)
	defer t.Stop()
	for {
		p.scan(ctx, &wg)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.kick:
		}
	}
}

// Kick asks for a scan now (a status was read with a worker not probed).
func (p *Prober) Kick() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// scan starts a probe of every worker that is due one, and forgets the
// workers no longer connected.
func (p *Prober) scan(ctx context.Context, wg *sync.WaitGroup) {
	views := p.cfg.Workers()
	now := p.cfg.Clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	live := make(map[string]bool, len(views))
	for _, v := range views {
		live[v.ID] = true
		tg := target{id: v.ID, incarnation: v.Incarnation, addr: v.HTTPAddr}
		e := p.entries[v.ID]
		if e == nil {
			e = &entry{}
			p.entries[v.ID] = e
		}
		if e.probing || (e.target == tg && !e.res.At.IsZero() && now.Sub(e.res.At) < p.cfg.Every) {
			continue
		}
		if e.target != tg {
			e.target, e.res = tg, Result{} // a result says nothing of another address
		}
		e.probing = true
		wg.Go(func() { p.probe(ctx, tg) })
	}
	for id, e := range p.entries {
		if !live[id] && !e.probing {
			delete(p.entries, id)
		}
	}
}

// probe probes tg and records the outcome, logging a change.
func (p *Prober) probe(ctx context.Context, tg target) {
	err := Probe(ctx, p.cfg.Client, p.cfg.Timeout, tg.id, tg.addr)
	res := Result{State: StateReachable, At: p.cfg.Clock.Now()}
	if err != nil {
		res.State, res.Error = StateUnreachable, err.Error()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entries[tg.id]
	if e == nil {
		return
	}
	e.probing = false
	if e.target != tg || ctx.Err() != nil {
		return // the worker moved on meanwhile, or the master is stopping
	}
	prev := e.last
	e.res, e.last = res, res.State
	switch {
	case res.State == StateUnreachable && prev != StateUnreachable:
		p.cfg.Logger.Warn().Str("worker", tg.id).Str("addr", tg.addr).Str("error", res.Error).
			Msg("worker unreachable at the address it advertised: the proxies cannot reach it either (check its --advertise and the firewall)")
	case res.State == StateReachable && prev == StateUnreachable:
		p.cfg.Logger.Info().Str("worker", tg.id).Str("addr", tg.addr).Msg("worker reachable again at the address it advertised")
	}
}

// Result is the last outcome for worker id at addr (false: none yet).
func (p *Prober) Result(id, addr string) (Result, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entries[id]
	if e == nil || e.target.addr != addr || e.res.State == "" {
		return Result{}, false
	}
	return e.res, true
}

// Annotate fills the Reach fields of the workers' statuses. A connected
// worker without a result starts a scan. A nil Prober (a master not
// started) annotates nothing.
func (p *Prober) Annotate(ws []wire.WorkerStatus) {
	if p == nil {
		return
	}
	missing := false
	for i := range ws {
		w := &ws[i]
		res, ok := p.Result(w.ID, w.HTTPAddr)
		if !ok {
			missing = missing || w.State == "connected"
			continue
		}
		w.Reach, w.ReachError, w.ReachChecked = res.State, res.Error, res.At
	}
	if missing {
		p.Kick()
	}
}

// Probe asks http://addr/healthz, as a proxy would dial it, and checks
// that worker id answers: a connection error, or another process or
// worker on that address, is an error saying so.
func Probe(ctx context.Context, c *http.Client, timeout time.Duration, id, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	url := "http://" + addr + "/healthz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("advertised address %q: %w", addr, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err // names the URL and the dial error
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	switch got := resp.Header.Get("X-CB-Worker"); got {
	case id:
		return nil
	case "":
		return fmt.Errorf("GET %s: HTTP %d from something that is not a CloudBrowser worker", url, resp.StatusCode)
	default:
		return fmt.Errorf("GET %s: answered by worker %s, not %s (two workers advertise one address?)", url, got, id)
	}
}
