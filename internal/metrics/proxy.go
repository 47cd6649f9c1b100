package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cloudbrowser-go/cloudbrowser/proxy"
)

// Proxy exports a reverse proxy's counters (and its route cache's, if any).
func Proxy(p *proxy.Proxy, cache *proxy.CachingRouter) []prometheus.Collector {
	c := prometheus.CounterValue
	cs := []prometheus.Collector{
		One("cloudbrowser_proxy_requests_total", "Requests seen by the proxy.", c, func() float64 { return float64(p.Stats().Requests) }),
		One("cloudbrowser_proxy_route_errors_total", "Requests the master could not route.", c, func() float64 { return float64(p.Stats().RouteErrors) }),
		One("cloudbrowser_proxy_upstream_errors_total", "Requests whose worker could not be reached.", c, func() float64 { return float64(p.Stats().UpstreamErrors) }),
		One("cloudbrowser_proxy_bad_requests_total", "Malformed requests.", c, func() float64 { return float64(p.Stats().BadRequests) }),
		One("cloudbrowser_proxy_websockets_open", "WebSockets being relayed.", prometheus.GaugeValue, func() float64 { return float64(p.Stats().WebSocketsOpen) }),
		One("cloudbrowser_proxy_websockets_total", "WebSockets relayed since start.", c, func() float64 { return float64(p.Stats().WebSocketsTotal) }),
		NewFunc("cloudbrowser_proxy_relay_bytes_total", "WebSocket bytes relayed, by direction.", c, []string{"direction"}, func() []Sample {
			s := p.Stats()
			return []Sample{{[]string{"up"}, float64(s.BytesUp)}, {[]string{"down"}, float64(s.BytesDown)}}
		}),
	}
	if cache != nil {
		cs = append(cs,
			One("cloudbrowser_proxy_route_cache_hits_total", "Instance routes answered from the cache.", c, func() float64 { return float64(cache.Stats().Hits) }),
			One("cloudbrowser_proxy_route_lookups_total", "Instance routes asked of the master.", c, func() float64 { return float64(cache.Stats().Lookups) }),
			One("cloudbrowser_proxy_route_fallbacks_total", "Routes answered while the master was unavailable.", c, func() float64 { return float64(cache.Stats().Fallbacks) }),
		)
	}
	return cs
}
