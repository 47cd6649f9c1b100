package master

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"

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
	// local receives invalidations for the embedded proxy, if any.
	local func(method string, arg any)
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
// cache when it reconnects.
func (p *proxySet) notify(_ context.Context, method string, arg any) {
	p.mu.Lock()
	conns := make([]*rmi.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	local := p.local
	p.mu.Unlock()
	if local != nil {
		local(method, arg)
	}
	for _, c := range conns {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
			defer cancel()
			if err := c.Call(ctx, wire.ObjProxy, method, nil, arg); err != nil {
				p.log.Debug().Str("proxy", c.PeerName()).Str("method", method).Err(err).Msg("invalidation not delivered")
			}
		}()
	}
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

func (p *proxySet) status() []wire.ProxyStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]wire.ProxyStatus, 0, len(p.conns)+1)
	for c, name := range p.conns {
		st := p.stats[c]
		out = append(out, wire.ProxyStatus{Name: name, Addr: c.RemoteAddr().String(),
			Requests: st.last.Requests, RequestsPerSec: st.rate, WebSocketsOpen: st.last.WebSocketsOpen})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
