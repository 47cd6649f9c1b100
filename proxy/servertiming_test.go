package proxy

import (
	"net/http"
	"strings"
	"testing"
)

// TestServerTimingRoute: page URLs carry the proxy's route lookup before
// the worker's own Server-Timing entries; assets do not.
func TestServerTimingRoute(t *testing.T) {
	w := startWorker(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Add("Server-Timing", "place;dur=1.0")
		rw.WriteHeader(http.StatusOK)
	}))
	r := &fakeRouter{}
	r.set(w, nil)
	_, srv := startProxy(t, Config{Router: r})
	c := client(t)
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"/notes", []string{"route;dur=", "place;dur=1.0"}},
		{"/notes/a/" + testInstance + "/b/" + testBrowser, []string{"route;dur=", "place;dur=1.0"}},
		{"/notes/a/" + testInstance + "/_cb/engine.js", []string{"place;dur=1.0"}},
	} {
		resp, err := c.Get(srv.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got := resp.Header.Values("Server-Timing")
		if len(got) != len(tc.want) {
			t.Fatalf("%s: Server-Timing %q, want %q", tc.path, got, tc.want)
		}
		for i, w := range tc.want {
			if !strings.HasPrefix(got[i], w) {
				t.Fatalf("%s: Server-Timing %q, want %q", tc.path, got, tc.want)
			}
		}
	}
}
