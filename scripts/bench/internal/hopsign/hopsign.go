// Package hopsign lets a benchmark driver talk to a worker directly, as the
// cluster's proxies do: workers answer only requests that carry a valid hop
// signature (internal/hop), under a key derived from the cluster secret.
package hopsign

import (
	"fmt"
	"net/http"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/hop"
	"github.com/cloudbrowser-go/cloudbrowser/internal/secret"
)

// Key derives the hop key from the cluster secret in secretFile (the
// master's <data-dir>/cluster.secret), as the master does.
func Key(secretFile string) ([]byte, error) {
	sec, err := secret.Load(secretFile)
	if err != nil {
		return nil, fmt.Errorf("hop key: %w", err)
	}
	return secret.Derive(sec, "http-hop", hop.KeyLen), nil
}

// Sign returns the X-CB-Hop value of a request for uri (path and query, as
// sent) with method to host (the worker's address, the Host header). The
// driver sends no X-Forwarded-* headers, so the worker sees the TCP peer.
func Sign(key []byte, method, host, uri string) string {
	return hop.Sign(key, time.Now(), hop.Fields{Method: method, Host: host, URI: uri})
}

// SignRequest sets req's hop signature.
func SignRequest(key []byte, req *http.Request) {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	req.Header.Set(hop.Header, Sign(key, req.Method, host, req.URL.RequestURI()))
}
