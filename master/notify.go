package master

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// proxySet holds the proxies subscribed to route invalidations.
type proxySet struct {
	log zerolog.Logger
	ctx context.Context
	wg  *sync.WaitGroup

	mu    sync.Mutex
	conns map[*rmi.Conn]string
	stats map[*rmi.Conn]proxyStats

	// local is the proxy embedded in the master (nil: none), told in
	// process.
	local atomic.Pointer[LocalProxy]
}

// proxySet passes each invalidation on to every subscribed proxy.
var _ contract.Proxy = (*proxySet)(nil)

// Invalidate drops iids' routes in every proxy (never fails: see notify).
func (p *proxySet) Invalidate(_ context.Context, iids []string) error {
	p.notify("Invalidate", func(ctx context.Context, c contract.ProxyClient) error { return c.Invalidate(ctx, iids) })
	return nil
}

// InvalidateAcked is Invalidate that waits until every proxy applied it,
// or ctx ends: a migration tells the old copy's clients to reconnect only
// after the proxies forgot its route (else they are sent back there).
func (p *proxySet) InvalidateAcked(ctx context.Context, iids []string) error {
	done := p.notify("Invalidate", func(ctx context.Context, c contract.ProxyClient) error { return c.Invalidate(ctx, iids) })
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("proxies: invalidation not acknowledged: %w", ctx.Err())
	}
}

// InvalidateWorker drops the routes to worker id in every proxy.
func (p *proxySet) InvalidateWorker(_ context.Context, id string) error {
	if l := p.local.Load(); l != nil {
		(*l).CloseWorker(id)
	}
	p.notify("InvalidateWorker", func(ctx context.Context, c contract.ProxyClient) error { return c.InvalidateWorker(ctx, id) })
	return nil
}

func (p *proxySet) add(c *rmi.Conn, name string) {
	p.mu.Lock()
	p.conns[c] = name
	p.mu.Unlock()
	p.log.Info().Str("proxy", name).Str("peer", c.RemoteAddr().String()).Msg("proxy subscribed")
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		select {
		case <-c.Done():
		case <-p.ctx.Done():
		}
		p.mu.Lock()
		delete(p.conns, c)
		delete(p.stats, c)
		p.mu.Unlock()
	}()
}

// notify sends an invalidation to every proxy without waiting: a proxy that
// misses one re-learns from the master after its cache TTL, and flushes its
// cache when it reconnects. done is closed once every proxy answered or
// failed.
func (p *proxySet) notify(method string, call func(context.Context, contract.ProxyClient) error) (done <-chan struct{}) {
	p.mu.Lock()
	conns := make([]*rmi.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	var calls sync.WaitGroup
	all := make(chan struct{})
	for _, c := range conns {
		p.wg.Add(1)
		calls.Add(1)
		go func() {
			defer p.wg.Done()
			defer calls.Done()
			ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
			defer cancel()
			if err := call(ctx, contract.ProxyClient{C: c}); err != nil {
				p.log.Debug().Str("proxy", c.PeerName()).Str("method", method).Err(err).Msg("invalidation not delivered")
			}
		}()
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		calls.Wait()
		close(all)
	}()
	return all
}

// proxyStats is a proxy's last report and the request rate since the one
// before.
type proxyStats struct {
	last wire.ProxyReport
	at   time.Time
	rate float64
}

// report records a proxy's counters.
func (p *proxySet) report(c *rmi.Conn, r wire.ProxyReport, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stats == nil {
		p.stats = map[*rmi.Conn]proxyStats{}
	}
	prev, ok := p.stats[c]
	st := proxyStats{last: r, at: now, rate: prev.rate}
	if ok && now.After(prev.at) && r.Requests >= prev.last.Requests {
		st.rate = float64(r.Requests-prev.last.Requests) / now.Sub(prev.at).Seconds()
	}
	p.stats[c] = st
}

// status lists the subscribed proxies by name, then the local one.
func (p *proxySet) status() []wire.ProxyStatus {
	p.mu.Lock()
	out := make([]wire.ProxyStatus, 0, len(p.conns)+1)
	for c, name := range p.conns {
		st := p.stats[c]
		out = append(out, wire.ProxyStatus{Name: name, Addr: c.RemoteAddr().String(),
			Requests: st.last.Requests, RequestsPerSec: st.rate, WebSocketsOpen: st.last.WebSocketsOpen})
	}
	p.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if l := p.local.Load(); l != nil {
		out = append(out, (*l).Status())
	}
	return out
}
