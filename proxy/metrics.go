package proxy

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cloudbrowser-go/cloudbrowser/internal/metrics"
)

// Collectors exports a reverse proxy's counters (and its route cache's, if
// any). They live here, not in internal/metrics, so that internal/ never
// imports a process package.
func Collectors(p *Proxy, cache *CachingRouter) []prometheus.Collector {
	c := prometheus.CounterValue
	cs := []prometheus.Collector{
		metrics.One("cloudbrowser_proxy_requests_total", "Requests seen by the proxy.", c, func() float64 { return float64(p.Stats().Requests) }),
		metrics.One("cloudbrowser_proxy_route_errors_total", "Requests the master could not route.", c, func() float64 { return float64(p.Stats().RouteErrors) }),
		metrics.One("cloudbrowser_proxy_upstream_errors_total", "Requests whose worker could not be reached.", c, func() float64 { return float64(p.Stats().UpstreamErrors) }),
		metrics.One("cloudbrowser_proxy_misdirected_total", "Worker answers 421 (instance not hosted there): cached routes dropped.", c, func() float64 { return float64(p.Stats().Misdirected) }),
		metrics.One("cloudbrowser_proxy_bad_requests_total", "Malformed requests.", c, func() float64 { return float64(p.Stats().BadRequests) }),
		metrics.One("cloudbrowser_proxy_websockets_open", "WebSockets being relayed.", prometheus.GaugeValue, func() float64 { return float64(p.Stats().WebSocketsOpen) }),
		metrics.One("cloudbrowser_proxy_websockets_total", "WebSockets relayed since start.", c, func() float64 { return float64(p.Stats().WebSocketsTotal) }),
		metrics.One("cloudbrowser_proxy_websockets_worker_gone_total", "WebSockets closed because the master declared their worker dead (the engine reconnects to the new copy).", c, func() float64 { return float64(p.Stats().WebSocketsWorkerGone) }),
		metrics.One("cloudbrowser_proxy_websockets_handed_off_total", "WebSockets given to their worker on this host instead of relayed.", c, func() float64 { return float64(p.Stats().WebSocketsHandedOff) }),
		metrics.One("cloudbrowser_proxy_worker_pairs_total", "Connections to workers on this host made over a unix socket pair instead of TCP.", c, func() float64 { return float64(p.Stats().WorkerPairs) }),
		metrics.One("cloudbrowser_proxy_edge_requests_total", "Requests the event-loop edge relayed or answered itself.", c, func() float64 { return float64(p.Stats().EdgeRequests) }),
		metrics.NewFunc("cloudbrowser_proxy_edge_handoffs_total", "Connections the edge handed to net/http, by reason.", c, []string{"reason"}, func() []metrics.Sample {
			var out []metrics.Sample
			for k, v := range p.EdgeHandoffs() {
				out = append(out, metrics.Sample{Labels: []string{k}, Value: float64(v)})
			}
			return out
		}),
		metrics.NewFunc("cloudbrowser_proxy_relay_bytes_total", "WebSocket bytes relayed, by direction.", c, []string{"direction"}, func() []metrics.Sample {
			s := p.Stats()
			return []metrics.Sample{{Labels: []string{"up"}, Value: float64(s.BytesUp)}, {Labels: []string{"down"}, Value: float64(s.BytesDown)}}
		}),
	}
	if cache != nil {
		cs = append(cs,
			metrics.One("cloudbrowser_proxy_route_cache_hits_total", "Instance routes answered from the cache.", c, func() float64 { return float64(cache.Stats().Hits) }),
			metrics.One("cloudbrowser_proxy_route_lookups_total", "Instance routes asked of the master.", c, func() float64 { return float64(cache.Stats().Lookups) }),
			metrics.One("cloudbrowser_proxy_route_fallbacks_total", "Routes answered while the master was unavailable.", c, func() float64 { return float64(cache.Stats().Fallbacks) }),
		)
	}
	return cs
}
