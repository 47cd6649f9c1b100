package main

import (
	"net/http"
	"testing"
	"time"
)

// The driver's cache decides what a warm load requests, so it must treat
// each kind of answer as a browser does.
func TestCachePolicy(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	later := now.Add(time.Hour)
	for _, tc := range []struct {
		name       string
		hdr        map[string]string
		stored     bool
		freshLater bool   // used without a request an hour later
		etag       string // validator sent on the next request
	}{
		{"immutable versioned asset", map[string]string{"Cache-Control": "public, max-age=31536000, immutable", "ETag": `"a"`}, true, true, `"a"`},
		{"no-cache with an ETag: revalidated", map[string]string{"Cache-Control": "no-cache", "ETag": `"b"`}, true, false, `"b"`},
		{"no-cache without validators: fetched again", map[string]string{"Cache-Control": "no-cache"}, true, false, ""},
		{"no-store: not kept", map[string]string{"Cache-Control": "no-store"}, false, false, ""},
		{"short max-age: stale later", map[string]string{"Cache-Control": "max-age=60", "ETag": `"c"`}, true, false, `"c"`},
		{"Last-Modified heuristic", map[string]string{"Last-Modified": now.Add(-100 * time.Hour).Format(http.TimeFormat)}, true, true, ""},
	} {
		h := http.Header{}
		for k, v := range tc.hdr {
			h.Set(k, v)
		}
		e, ok := entryOf(h, now)
		if ok != tc.stored {
			t.Errorf("%s: stored %v", tc.name, ok)
			continue
		}
		if !ok {
			continue
		}
		if e.fresh(later) != tc.freshLater || e.etag != tc.etag {
			t.Errorf("%s: fresh an hour later %v, etag %q", tc.name, e.fresh(later), e.etag)
		}
	}
	// A 304 renews the entry with its own headers.
	e, _ := entryOf(http.Header{"Cache-Control": {"no-cache"}, "Etag": {`"x"`}}, now)
	e = e.refreshed(http.Header{"Cache-Control": {"max-age=7200"}, "Etag": {`"y"`}}, now)
	if !e.fresh(later) || e.etag != `"y"` {
		t.Errorf("after a 304: %+v", e)
	}
}
