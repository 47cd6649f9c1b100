// Command pageload measures loading the client engine page of a Browser URL
// and all its assets, by many users at once, as browsers do it: the page,
// then the assets it names in parallel (at most 6 connections per host, kept
// alive between loads). Each load is either cold (an empty cache) or warm
// (the cache a browser keeps from the answers' headers: a fresh entry is used
// without a request, one marked no-cache or stale is revalidated with
// If-None-Match / If-Modified-Since, one without validators is fetched
// again), both through the proxy and straight to the worker (signed as a
// proxy would, -secret-file). Phases alternate between the targets, and the
// results of all rounds are pooled. It prints a markdown table: latency per
// page load (p50/p95/p99), requests, 304s and bytes per load (on the wire:
// heads and bodies), and the proxy÷direct ratios.
package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"flag"
	"fmt"
	"html"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/scripts/bench/internal/engineclient"
	"github.com/cloudbrowser-go/cloudbrowser/scripts/bench/internal/hopsign"
)

func main() {
	public := flag.String("public", "http://127.0.0.1:8080", "public (proxy) URL")
	worker := flag.String("worker", "", "the worker's HTTP address (host:port) for the direct loads (\"\" = proxy only)")
	secretFile := flag.String("secret-file", "", "the cluster secret: direct requests are signed as a proxy would (workers refuse unsigned ones)")
	app := flag.String("app", "notes", "app mount point; each user is sent to their own Browser URL")
	users := flag.Int("users", 20, "concurrent users")
	loads := flag.Int("loads", 10, "page loads per user in each measured phase")
	rounds := flag.Int("rounds", 3, "rounds of the four phases (cold/warm × proxy/direct), alternating which target goes first")
	warmup := flag.Int("warmup", 2, "unmeasured loads per user and target first (they also fill the warm caches)")
	flag.Parse()
	var key []byte
	if *worker != "" {
		if *secretFile == "" {
			fmt.Fprintln(os.Stderr, "pageload: -worker needs -secret-file (workers answer only signed requests)")
			os.Exit(2)
		}
		var err error
		if key, err = hopsign.Key(*secretFile); err != nil {
			fmt.Fprintln(os.Stderr, "pageload:", err)
			os.Exit(1)
		}
	}
	pu, err := url.Parse(*public)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pageload:", err)
		os.Exit(2)
	}
	targets := []target{{name: "proxy", host: pu.Host}}
	if *worker != "" {
		targets = append(targets, target{name: "direct", host: *worker, key: key})
	}
	if err := run(*public, *app, targets, *users, *loads, *rounds, *warmup); err != nil {
		fmt.Fprintln(os.Stderr, "pageload:", err)
		os.Exit(1)
	}
}

// target is where page loads go: the proxy, or a worker signed for.
type target struct {
	name, host string
	key        []byte // hop key: set for a worker
}

// user is one simulated browser: its Browser URL, cookies, connections and
// one HTTP cache per target (URLs differ by host).
type user struct {
	path    string
	cookies []*http.Cookie
	client  *http.Client
	down    atomic.Int64 // bytes read from its connections
	up      atomic.Int64 // bytes written
	warm    map[string]*cache
}

// load is one page load's outcome.
type load struct {
	dur         time.Duration
	requests    int
	notModified int
	down, up    int64
}

func run(public, app string, targets []target, nUsers, loads, rounds, warmup int) error {
	users := make([]*user, nUsers)
	for i := range users {
		path, cookies, err := engineclient.Open(context.Background(), public, app)
		if err != nil {
			return fmt.Errorf("user %d: open /%s: %w", i, app, err)
		}
		users[i] = newUser(path, cookies)
		for _, tg := range targets {
			users[i].warm[tg.name] = newCache()
		}
	}
	// Warm-up: connections opened, routes cached, warm caches filled.
	for _, tg := range targets {
		if _, err := phase(users, tg, warmup, false); err != nil {
			return fmt.Errorf("warm-up %s: %w", tg.name, err)
		}
	}
	type key struct{ target, cache string }
	res := map[key][]load{}
	for r := 0; r < rounds; r++ {
		order := slices.Clone(targets)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, cold := range []bool{true, false} {
			for _, tg := range order {
				ls, err := phase(users, tg, loads, cold)
				if err != nil {
					return fmt.Errorf("round %d, %s: %w", r+1, tg.name, err)
				}
				k := key{tg.name, cacheName(cold)}
				res[k] = append(res[k], ls...)
			}
		}
	}
	fmt.Printf("\nPage load of the client engine (/%s, a Browser URL and its assets): %d users at once, "+
		"%d loads each per phase, %d rounds (%d loads per row)\n\n", app, nUsers, loads, rounds, nUsers*loads*rounds)
	fmt.Println("| path | cache | p50 | p95 | p99 | requests/load | 304s/load | KiB down/load | KiB up/load | p50 ÷ direct | p95 ÷ direct | p99 ÷ direct |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, c := range []string{"cold", "warm"} {
		direct := res[key{"direct", c}]
		for _, tg := range targets {
			ls := res[key{tg.name, c}]
			s := summarize(ls)
			ratios := []string{"–", "–", "–"}
			if len(direct) > 0 {
				d := summarize(direct)
				for i, q := range []float64{.5, .95, .99} {
					ratios[i] = fmt.Sprintf("%.2f", s.pct(q)/d.pct(q))
				}
			}
			fmt.Printf("| %s | %s | %s | %s | %s | %.2f | %.2f | %.2f | %.2f | %s | %s | %s |\n", tg.name, c,
				ms(s.pct(.5)), ms(s.pct(.95)), ms(s.pct(.99)), s.requests, s.notModified,
				s.down/1024, s.up/1024, ratios[0], ratios[1], ratios[2])
		}
	}
	return nil
}

func cacheName(cold bool) string {
	if cold {
		return "cold"
	}
	return "warm"
}

func ms(d float64) string { return strconv.FormatFloat(d, 'f', 2, 64) + " ms" }

// phase runs n loads per user, all users at once; cold ones start from an
// empty cache each time, warm ones use and update the user's cache.
func phase(users []*user, tg target, n int, cold bool) ([]load, error) {
	var (
		mu    sync.Mutex
		out   []load
		first error
		wg    sync.WaitGroup
	)
	start := make(chan struct{})
	for _, u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; i < n; i++ {
				c := u.warm[tg.name]
				if cold {
					c = newCache()
				}
				l, err := u.load(tg, c)
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				out = append(out, l)
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	return out, first
}

func newUser(path string, cookies []*http.Cookie) *user {
	u := &user{path: path, cookies: cookies, warm: map[string]*cache{}}
	d := &net.Dialer{Timeout: 10 * time.Second}
	u.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &countingConn{Conn: c, u: u}, nil
		},
		// What a browser does: 6 connections per host, kept alive; it
		// asks for compression and decodes it itself (so do we, below).
		MaxConnsPerHost:     6,
		MaxIdleConnsPerHost: 6,
		DisableCompression:  true,
		IdleConnTimeout:     90 * time.Second,
	}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return u
}

type countingConn struct {
	net.Conn
	u *user
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.u.down.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.u.up.Add(int64(n))
	return n, err
}

// assetRef finds what a page loads: scripts, images and linked
// stylesheets (the engine page has no other kind).
var assetRef = regexp.MustCompile(`<(?:script|img)\b[^>]*\bsrc="([^"]+)"|<link\b[^>]*\bhref="([^"]+)"`)

// load loads u's engine page from tg with cache c: the page, then its
// assets in parallel.
func (u *user) load(tg target, c *cache) (load, error) {
	down0, up0 := u.down.Load(), u.up.Load()
	t0 := time.Now()
	base := &url.URL{Scheme: "http", Host: tg.host, Path: u.path}
	page, st, err := u.fetch(tg, base.String(), c, true)
	if err != nil {
		return load{}, fmt.Errorf("page: %w", err)
	}
	var refs []string
	for _, m := range assetRef.FindAllSubmatch(page, -1) {
		ref := string(m[1]) + string(m[2])
		r, err := base.Parse(html.UnescapeString(ref))
		if err != nil {
			return load{}, fmt.Errorf("asset %q: %w", ref, err)
		}
		refs = append(refs, r.String())
	}
	if len(refs) == 0 {
		return load{}, fmt.Errorf("page %s names no assets:\n%.500s", base, page)
	}
	sts := make([]fetchStats, len(refs))
	errs := make([]error, len(refs))
	var wg sync.WaitGroup
	for i, ref := range refs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, sts[i], errs[i] = u.fetch(tg, ref, c, false)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return load{}, err
	}
	l := load{dur: time.Since(t0), requests: st.requests, notModified: st.notModified}
	for _, s := range sts {
		l.requests += s.requests
		l.notModified += s.notModified
	}
	l.down, l.up = u.down.Load()-down0, u.up.Load()-up0
	return l, nil
}

type fetchStats struct{ requests, notModified int }

// fetch gets rawURL as a browser would with cache c, and returns the
// decoded body if decode is set (the page, to find its assets). Assets are
// not decoded: the driver shares the CPUs with the servers, and a
// browser's decoding is no cost of the cluster.
func (u *user) fetch(tg target, rawURL string, c *cache, decode bool) ([]byte, fetchStats, error) {
	now := time.Now()
	e, cached := c.get(rawURL)
	if cached && e.fresh(now) {
		return nil, fetchStats{}, nil
	}
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, fetchStats{}, err
	}
	req.Header.Set("Accept-Encoding", "gzip, deflate, br")
	for _, ck := range u.cookies {
		req.AddCookie(ck)
	}
	if cached {
		if e.etag != "" {
			req.Header.Set("If-None-Match", e.etag)
		}
		if e.lastModified != "" {
			req.Header.Set("If-Modified-Since", e.lastModified)
		}
	}
	if tg.key != nil {
		hopsign.SignRequest(tg.key, req)
	}
	resp, err := u.client.Do(req)
	if err != nil {
		return nil, fetchStats{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fetchStats{}, fmt.Errorf("GET %s: body: %w", rawURL, err)
	}
	st := fetchStats{requests: 1}
	switch {
	case resp.StatusCode == http.StatusNotModified && cached:
		st.notModified = 1
		c.put(rawURL, e.refreshed(resp.Header, now))
		return nil, st, nil
	case resp.StatusCode != http.StatusOK:
		return nil, st, fmt.Errorf("GET %s: %s: %.300s", rawURL, resp.Status, raw)
	}
	if ent, ok := entryOf(resp.Header, now); ok {
		c.put(rawURL, ent)
	}
	body := raw
	if decode && resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, st, fmt.Errorf("GET %s: gzip: %w", rawURL, err)
		}
		if body, err = io.ReadAll(zr); err != nil {
			return nil, st, fmt.Errorf("GET %s: gzip: %w", rawURL, err)
		}
	}
	return body, st, nil
}

// cache is one user's HTTP cache for one target: what a browser keeps of
// each answer to decide on the next load (RFC 9111, the parts these
// answers use: no-store, no-cache, max-age, validators).
type cache struct {
	mu sync.Mutex
	m  map[string]entry
}

type entry struct {
	etag, lastModified string
	noCache            bool      // revalidate before every use
	until              time.Time // fresh until (zero: never fresh)
}

func newCache() *cache { return &cache{m: map[string]entry{}} }

func (c *cache) get(u string) (entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[u]
	return e, ok
}

func (c *cache) put(u string, e entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[u] = e
}

func (e entry) fresh(now time.Time) bool { return !e.noCache && now.Before(e.until) }

// entryOf is what a browser stores of a 200 answer (false: nothing, for
// no-store). Without max-age or validators it keeps the bytes but must
// fetch them again: browsers guess a freshness only from Last-Modified,
// which only counts when it is sent.
func entryOf(h http.Header, now time.Time) (entry, bool) {
	cc := directives(h.Get("Cache-Control"))
	if _, ok := cc["no-store"]; ok {
		return entry{}, false
	}
	e := entry{etag: h.Get("ETag"), lastModified: h.Get("Last-Modified")}
	return e.refreshed(h, now), true
}

// refreshed applies an answer's freshness (a 200's or a 304's) to e; a 304
// may bring a new ETag.
func (e entry) refreshed(h http.Header, now time.Time) entry {
	if v := h.Get("ETag"); v != "" {
		e.etag = v
	}
	cc := directives(h.Get("Cache-Control"))
	_, e.noCache = cc["no-cache"]
	e.until = time.Time{}
	if v, ok := cc["max-age"]; ok {
		if s, err := strconv.ParseInt(v, 10, 64); err == nil && s > 0 {
			e.until = now.Add(time.Duration(min(s, math.MaxInt64/int64(time.Second))) * time.Second)
		}
	} else if lm, err := http.ParseTime(e.lastModified); err == nil && now.After(lm) {
		e.until = now.Add(now.Sub(lm) / 10) // the heuristic browsers apply
	}
	return e
}

func directives(v string) map[string]string {
	m := map[string]string{}
	for _, d := range strings.Split(v, ",") {
		k, val, _ := strings.Cut(strings.TrimSpace(d), "=")
		if k != "" {
			m[strings.ToLower(k)] = strings.Trim(val, `"`)
		}
	}
	return m
}

// summary is a row of the table: latency percentiles (ms) and means.
type summary struct {
	durs                            []float64
	requests, notModified, down, up float64
}

func summarize(ls []load) summary {
	var s summary
	for _, l := range ls {
		s.durs = append(s.durs, float64(l.dur.Microseconds())/1000)
		s.requests += float64(l.requests)
		s.notModified += float64(l.notModified)
		s.down += float64(l.down)
		s.up += float64(l.up)
	}
	slices.Sort(s.durs)
	if n := float64(len(ls)); n > 0 {
		s.requests, s.notModified, s.down, s.up = s.requests/n, s.notModified/n, s.down/n, s.up/n
	}
	return s
}

// pct is the nearest-rank percentile q of the latencies.
func (s summary) pct(q float64) float64 {
	if len(s.durs) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(s.durs)))) - 1
	return s.durs[max(i, 0)]
}
