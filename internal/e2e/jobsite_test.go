package e2e

import (
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/master/jobs"
)

// jobSite is a local web site served on several loopback ports, each port
// one "host" as the job queue sees it. It counts, per host, the page
// requests in flight (and their peak) and when each started, so a test can
// assert the queue's politeness limits were never exceeded.
type jobSite struct {
	t     *testing.T
	hosts []*siteHost
}

type siteHost struct {
	addr  string // 127.0.0.1:port
	delay time.Duration

	mu       sync.Mutex
	inFlight int
	peak     int
	starts   []time.Time
	served   map[string]int    // path -> requests
	status   map[string]int    // path -> forced status
	retry    map[string]string // path -> Retry-After sent with it
	startsBy map[string][]time.Time
	every    map[string]int // path -> every request, robots.txt and favicon included
	robots   string
	// subres: pages have two images and a script of their own host
	// (/img/<name>-1.png, /img/<name>-2.png, /js/<name>.js).
	subres bool
	// Every browser request (all but robots.txt, the master's): in flight
	// now, the peak, and when each started.
	anyInFlight, anyPeak int
	anyStarts            []time.Time
}

func newJobSite(t *testing.T, hosts int, delay time.Duration) *jobSite {
	s := &jobSite{t: t}
	for range hosts {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		h := &siteHost{addr: ln.Addr().String(), delay: delay, served: map[string]int{}, status: map[string]int{},
			retry: map[string]string{}, startsBy: map[string][]time.Time{}, every: map[string]int{}}
		srv := &http.Server{Handler: h}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		s.hosts = append(s.hosts, h)
	}
	return s
}

// egressArgs are the worker flags that let virtual browsers reach the site.
func (s *jobSite) egressArgs() []string {
	var out []string
	for _, h := range s.hosts {
		out = append(out, "--egress-allow", h.addr)
	}
	return out
}

func (h *siteHost) url(path string) string { return "http://" + h.addr + path }

func (h *siteHost) setStatus(path string, code int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.status[path] = code
}

// setRetryAfter answers path with status and a Retry-After header.
func (h *siteHost) setRetryAfter(path string, status int, retryAfter string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.status[path], h.retry[path] = status, retryAfter
}

// startsOf are the times path's requests started.
func (h *siteHost) startsOf(path string) []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.startsBy[path])
}

// allStarts are the times every page request started, in order.
func (h *siteHost) allStarts() []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := slices.Clone(h.starts)
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

func (h *siteHost) setRobots(body string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.robots = body
}

// requests is every request the host got, by path.
func (h *siteHost) requests() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.every)
}

func (h *siteHost) count(path string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.served[path]
}

// ServeHTTP: /robots.txt (not counted), /page/<name> (counted: the
// document a job's browser loads), anything else 404 (favicon).
func (h *siteHost) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.every[r.URL.Path]++
	if r.URL.Path != "/robots.txt" {
		h.anyInFlight++
		h.anyPeak = max(h.anyPeak, h.anyInFlight)
		h.anyStarts = append(h.anyStarts, time.Now())
		defer func() {
			h.mu.Lock()
			h.anyInFlight--
			h.mu.Unlock()
		}()
	}
	subres := h.subres
	h.mu.Unlock()
	switch {
	case strings.HasPrefix(r.URL.Path, "/img/"):
		time.Sleep(h.delay)
		w.Header().Set("Content-Type", "image/gif")
		_, _ = w.Write(gif1x1)
		return
	case strings.HasPrefix(r.URL.Path, "/js/"):
		time.Sleep(h.delay)
		w.Header().Set("Content-Type", "text/javascript")
		_, _ = io.WriteString(w, "document.title += ' (scripted)';")
		return
	}
	if r.URL.Path == "/robots.txt" {
		h.mu.Lock()
		body := h.robots
		h.mu.Unlock()
		if body == "" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(body))
		return
	}
	if r.URL.Path == "/go" { // a redirect to ?to=
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
		return
	}
	if !strings.HasPrefix(r.URL.Path, "/page/") {
		http.NotFound(w, r)
		return
	}
	h.mu.Lock()
	h.inFlight++
	h.peak = max(h.peak, h.inFlight)
	now := time.Now()
	h.starts = append(h.starts, now)
	h.startsBy[r.URL.Path] = append(h.startsBy[r.URL.Path], now)
	h.served[r.URL.Path]++
	code, retry := h.status[r.URL.Path], h.retry[r.URL.Path]
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.inFlight--
		h.mu.Unlock()
	}()
	time.Sleep(h.delay)
	if code == 0 {
		code = http.StatusOK
	}
	name := strings.TrimPrefix(r.URL.Path, "/page/")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if retry != "" {
		w.Header().Set("Retry-After", retry)
	}
	w.WriteHeader(code)
	extra := ""
	if subres {
		extra = fmt.Sprintf(`<img src="/img/%[1]s-1.png"><img src="/img/%[1]s-2.png"><script src="/js/%[1]s.js"></script>`, name)
	}
	fmt.Fprintf(w, "<!doctype html><title>Page %s</title><body><h1 id=\"h\">Page %s on %s</h1>%s<p style=\"height:1500px\">tall</p></body>", name, name, h.addr, extra)
}

// gif1x1 is a transparent 1×1 GIF.
var gif1x1 = []byte("GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01\x00\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;")

func (h *siteHost) setSubresources(on bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.subres = on
}

// anyStats are every browser request's peak concurrency, most starts in
// any one second, and the gaps between starts (for failures).
func (h *siteHost) anyStats() (peak, perSec int, gaps []time.Duration) {
	h.mu.Lock()
	starts := slices.Clone(h.anyStarts)
	peak = h.anyPeak
	h.mu.Unlock()
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(starts); i++ {
		gaps = append(gaps, starts[i].Sub(starts[i-1]).Round(time.Millisecond))
	}
	return peak, jobs.MaxStartsIn(starts, time.Second), gaps
}

// maxStartsPerWindow is the most page requests that started within any
// window of length d.
func (h *siteHost) maxStartsPerWindow(d time.Duration) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return jobs.MaxStartsIn(h.starts, d)
}

func (h *siteHost) peakInFlight() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.peak
}

// gaps lists the times between consecutive page requests (for failures).
func (h *siteHost) gaps() []time.Duration {
	h.mu.Lock()
	starts := slices.Clone(h.starts)
	h.mu.Unlock()
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	var out []time.Duration
	for i := 1; i < len(starts); i++ {
		out = append(out, starts[i].Sub(starts[i-1]).Round(time.Millisecond))
	}
	return out
}
