package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/assets"
	"github.com/cloudbrowser-go/cloudbrowser/internal/httpsec"
)

var (
	engineScript = regexp.MustCompile(`<script src="([^"]+/_cb/engine\.js\?v=[^"]+)"`)
	engineStyle  = regexp.MustCompile(`<link rel="stylesheet" href="([^"?]+/_cb/engine\.css)\?v=[^"]+"`)
)

// openEngine opens app as u and returns the Browser URL's engine page and
// the versioned engine.js URL it names.
func openEngine(t *testing.T, u *user, app string) (hop, string) {
	t.Helper()
	hops := u.open(app)
	page := hops[len(hops)-1]
	if page.status != 200 || !strings.Contains(page.path, "/b/") {
		t.Fatalf("did not reach a Browser URL: %+v", hops)
	}
	m := engineScript.FindStringSubmatch(page.body)
	if m == nil {
		t.Fatalf("engine page names no versioned engine.js:\n%.500s", page.body)
	}
	return page, m[1]
}

// TestEngineAssetsThroughProxy: through a proxy process, the Browser URL's engine
// page names engine.js by version; that URL comes back gzipped and
// immutable with an ETag, and asking again with the ETag gets a 304 (the
// proxy relays validators and the empty answer). An unversioned asset must
// be revalidated, and is, with a 304.
func TestEngineAssetsThroughProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := startCluster(t, clusterOpts{proxies: 1, workers: 1})
	u := newUser(t, "http://"+c.public)
	page, js := openEngine(t, u, "/hello")

	// The user's client, with the encoding asked for by hand (Go's
	// transport would otherwise ask for gzip and undo it unseen).
	do := func(method, path string, hdr ...string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, u.base+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := u.c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s %s: body: %v", method, path, err)
		}
		return resp, b
	}

	first, body := do("GET", js, "Accept-Encoding", "gzip, deflate, br")
	h := first.Header
	etag := h.Get("ETag")
	if first.StatusCode != 200 || h.Get("Cache-Control") != assets.Immutable || h.Get("Content-Encoding") != "gzip" ||
		h.Get("Vary") != "Accept-Encoding" || !strings.HasPrefix(h.Get("Content-Type"), "text/javascript") ||
		!strings.HasPrefix(etag, `"`) || h.Get("X-CB-Worker") == "" || h.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("GET %s: %d %v", js, first.StatusCode, h)
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("gzip body of %d bytes: %v", len(body), err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil || !bytes.Contains(plain, []byte("CloudBrowser client engine")) {
		t.Fatalf("engine.js decompressed: %v, %.100q", err, plain)
	}

	again, body := do("GET", js, "Accept-Encoding", "gzip, deflate, br", "If-None-Match", etag)
	if again.StatusCode != http.StatusNotModified || len(body) != 0 || again.Header.Get("ETag") != etag ||
		again.Header.Get("Cache-Control") != assets.Immutable || again.Header.Get("Content-Encoding") != "" {
		t.Fatalf("GET %s with If-None-Match %s: %d, %d bytes, %v", js, etag, again.StatusCode, len(body), again.Header)
	}

	// The page itself keeps its own policy, and is never stored.
	resp, _ := do("GET", page.path)
	if resp.Header.Get("Content-Security-Policy") != httpsec.EngineCSP || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("engine page headers: %v", resp.Header)
	}

	// Without a version: served, but to be revalidated on each use.
	s := engineStyle.FindStringSubmatch(page.body)
	if s == nil {
		t.Fatalf("engine page names no engine.css:\n%s", page.body)
	}
	css, _ := do("GET", s[1])
	if css.StatusCode != 200 || css.Header.Get("Cache-Control") != assets.Revalidate || css.Header.Get("ETag") == "" ||
		css.Header.Get("Content-Type") != "text/css; charset=utf-8" {
		t.Fatalf("GET %s: %d %v", s[1], css.StatusCode, css.Header)
	}
	if again, _ := do("GET", s[1], "If-None-Match", css.Header.Get("ETag")); again.StatusCode != http.StatusNotModified {
		t.Fatalf("GET %s revalidated: %d %v", s[1], again.StatusCode, again.Header)
	}
}

// TestEngineAssetsCachedByChromium: a real browser keeps the versioned
// assets. Coming back to its Browser URL, a user's Chromium takes
// engine.js and engine.css from its cache (nothing transferred, not even a
// revalidation) and only the page from the network.
func TestEngineAssetsCachedByChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	c := startCluster(t, clusterOpts{proxies: 1, workers: 1})
	users := userBrowsers(t)
	b := open(t, users, "http://"+c.public+"/hello")
	const assetsLoaded = `performance.getEntriesByType("resource").filter(e => e.name.includes("/_cb/engine.")).map(e => e.transferSize > 0).join()`
	eventually(t, b, "the first visit downloads the assets", assetsLoaded, "true,true")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Navigate(ctx, b.Page().URL); err != nil {
		t.Fatal(err)
	}
	eventually(t, b, "the second visit takes them from the cache", assetsLoaded, "false,false")
	eventually(t, b, "the page itself comes from the network",
		`performance.getEntriesByType("navigation")[0].transferSize > 0`, "true")
}
