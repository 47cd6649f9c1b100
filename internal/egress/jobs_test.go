package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
)

// fakePacer records a job endpoint's calls; slots bounds requests in
// flight (0: no bound); refuse makes Go fail.
type fakePacer struct {
	mu     sync.Mutex
	events []string
	slots  chan struct{}
	refuse bool
}

func (p *fakePacer) log(f string, a ...any) {
	p.mu.Lock()
	p.events = append(p.events, fmt.Sprintf(f, a...))
	p.mu.Unlock()
}

func (p *fakePacer) Go(ctx context.Context, n int64, hostport string, doc bool) error {
	if p.refuse {
		return errors.New("not current")
	}
	if p.slots != nil {
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.log("go %d doc=%v", n, doc)
	return nil
}

func (p *fakePacer) Sent(n int64, hostport string, doc bool, after time.Duration) {
	p.log("sent %d", n)
}

func (p *fakePacer) End(n int64, hostport string) {
	p.log("end %d", n)
	if p.slots != nil {
		<-p.slots
	}
}

func (p *fakePacer) got() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.events)
}

// loopbackEndpoint is an endpoint of a guard that allows 127.0.0.1.
func loopbackEndpoint(t *testing.T) *Endpoint {
	t.Helper()
	g, err := New(Config{Allow: mustRules(t, "127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	e, err := g.Open(nil)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestJobRequestsPaced: a job browser's every request asks the pacer for
// a go, says it was sent and ended, in that order; the document (armed by
// OnNextRequest) takes a go without a start; a refused go answers 503 and
// never reaches the site.
func TestJobRequestsPaced(t *testing.T) {
	site := newTarget(t, "127.0.0.1:0")
	e := loopbackEndpoint(t)
	p := &fakePacer{}
	e.SetJob(JobMode{Pacer: p})
	hp := "127.0.0.1:" + site.port
	e.OnNextRequest(hp, func(time.Time) {})
	for _, path := range []string{"/", "/img.png"} {
		if code, _ := rawGet(t, e.ProxyURL(), "http://"+hp+path); code != 200 {
			t.Fatalf("GET %s: %d", path, code)
		}
	}
	// The end follows the answer's relay (the browser may have it, and
	// send its next request, a moment before).
	testutil.Eventually(t, 5*time.Second, func() error {
		got := p.got()
		for _, seq := range [][]string{{"go 1 doc=true", "sent 1", "end 1"}, {"go 2 doc=false", "sent 2", "end 2"}} {
			last := -1
			for _, ev := range seq {
				i := slices.Index(got, ev)
				if i <= last {
					return fmt.Errorf("pacer calls %v: want %v in order", got, seq)
				}
				last = i
			}
		}
		if len(got) != 6 {
			return fmt.Errorf("pacer calls %v", got)
		}
		return nil
	})
	p.refuse = true
	if code, _ := rawGet(t, e.ProxyURL(), "http://"+hp+"/late"); code != http.StatusServiceUnavailable || site.hits.Load() != 2 {
		t.Fatalf("a refused go: %d, site hits %d", code, site.hits.Load())
	}
	// Without a job, nothing is asked.
	e.ClearJob()
	p.refuse = false
	if code, _ := rawGet(t, e.ProxyURL(), "http://"+hp+"/free"); code != 200 || len(p.got()) != 6 {
		t.Fatalf("after ClearJob: %d, calls %v", code, p.got())
	}
}

// TestJobRequestsHeldInFlight: with one slot, concurrent requests reach
// the site one at a time: a request holds its slot until its answer was
// relayed.
func TestJobRequestsHeldInFlight(t *testing.T) {
	var mu sync.Mutex
	inFlight, peak := 0, 0
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inFlight++
		peak = max(peak, inFlight)
		mu.Unlock()
		time.Sleep(20 * time.Millisecond) // the site's work: overlaps without the slot
		mu.Lock()
		inFlight--
		mu.Unlock()
		fmt.Fprint(w, "ok")
	}))
	defer site.Close()
	e := loopbackEndpoint(t)
	e.SetJob(JobMode{Pacer: &fakePacer{slots: make(chan struct{}, 1)}})
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, err := proxyGet(e.ProxyURL(), fmt.Sprintf("%s/%d", site.URL, i)); err != nil || code != 200 {
				t.Errorf("GET %d: %d %v", i, code, err)
			}
		}()
	}
	wg.Wait()
	if peak != 1 {
		t.Fatalf("the site saw %d requests at once with one slot", peak)
	}
}

// TestJobDocumentOnly: a check without subresources loads its document
// and what its redirects lead to; anything else is refused before the
// pacer is asked. Over https, one tunnel per host.
func TestJobDocumentOnly(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path)
		mu.Unlock()
		if r.URL.Path == "/old" {
			http.Redirect(w, r, "/new?x=1", http.StatusFound)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	defer site.Close()
	secure := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "tls ok") }))
	defer secure.Close()
	e := loopbackEndpoint(t)
	p := &fakePacer{}
	e.SetJob(JobMode{Pacer: p, DocumentOnly: true})
	hp := strings.TrimPrefix(site.URL, "http://")
	e.OnNextRequest(hp, func(time.Time) {})
	for _, tc := range []struct {
		url  string
		code int
	}{
		{site.URL + "/old", http.StatusFound},
		{site.URL + "/img.png", http.StatusForbidden},
		{site.URL + "/new?x=1", http.StatusOK},
		{site.URL + "/new?x=1", http.StatusForbidden}, // once per redirect
	} {
		if code, _ := rawGet(t, e.ProxyURL(), tc.url); code != tc.code {
			t.Errorf("GET %s: %d, want %d", tc.url, code, tc.code)
		}
	}
	mu.Lock()
	if !slices.Equal(seen, []string{"/old", "/new"}) {
		t.Errorf("the site saw %v", seen)
	}
	mu.Unlock()
	testutil.Eventually(t, 5*time.Second, func() error {
		if got := p.got(); len(got) != 6 {
			return fmt.Errorf("pacer calls %v, want 2 requests", got)
		}
		return nil
	})

	pu, _ := url.Parse(e.ProxyURL())
	client := func() *http.Client {
		return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	}
	c1 := client()
	resp, err := c1.Get(secure.URL + "/")
	if err != nil {
		t.Fatalf("first tunnel: %v", err)
	}
	resp.Body.Close()
	if _, err := client().Get(secure.URL + "/again"); err == nil {
		t.Fatal("a second tunnel to the host was opened")
	}
	// The first tunnel holds its go until the job ends: ClearJob cuts it.
	e.ClearJob()
	testutil.Eventually(t, 5*time.Second, func() error {
		if got := p.got(); len(got) != 9 || !slices.Contains(got, "end 3") {
			return fmt.Errorf("pacer calls after ClearJob: %v", got)
		}
		return nil
	})
	c1.CloseIdleConnections()
}

// TestJobTunnelCutByClearJob: a raw tunnel stays open while the job runs
// and is closed by ClearJob.
func TestJobTunnelCutByClearJob(t *testing.T) {
	ln := holdingListener(t)
	e := loopbackEndpoint(t)
	p := &fakePacer{}
	e.SetJob(JobMode{Pacer: p})
	c, resp := openTunnel(t, e.ProxyURL(), ln.Addr().String())
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v", resp.Status)
	}
	if got := p.got(); !slices.Equal(got, []string{"go 1 doc=false", "sent 1"}) {
		t.Fatalf("open tunnel: %v", got)
	}
	e.ClearJob()
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("read after ClearJob: %v", err)
	}
	testutil.Eventually(t, 5*time.Second, func() error {
		if got := p.got(); len(got) != 3 {
			return fmt.Errorf("pacer calls after ClearJob: %v", got)
		}
		return nil
	})
}

// TestClearJobEndsWaits: a request waiting for a go when the job ends is
// answered (503) at once, not left waiting.
func TestClearJobEndsWaits(t *testing.T) {
	site := newTarget(t, "127.0.0.1:0")
	e := loopbackEndpoint(t)
	p := &fakePacer{slots: make(chan struct{}, 1)}
	p.slots <- struct{}{} // every slot taken
	e.SetJob(JobMode{Pacer: p})
	code := make(chan int, 1)
	go func() {
		c, err := proxyGet(e.ProxyURL(), "http://127.0.0.1:"+site.port+"/")
		if err != nil {
			t.Error(err)
		}
		code <- c
	}()
	testutil.Eventually(t, 5*time.Second, func() error {
		if e.job.Load().n.Load() != 1 {
			return errors.New("the request has not asked for a go yet")
		}
		return nil
	})
	e.ClearJob()
	select {
	case c := <-code:
		if c != http.StatusServiceUnavailable || site.hits.Load() != 0 {
			t.Fatalf("a waiting request after ClearJob: %d, site hits %d", c, site.hits.Load())
		}
	case <-time.After(testutil.Scale(10 * time.Second)):
		t.Fatal("the waiting request was not answered after ClearJob")
	}
}

// proxyGet is rawGet for goroutines: errors are returned.
func proxyGet(proxy, rawURL string) (int, error) {
	c, err := net.Dial("tcp", strings.TrimPrefix(proxy, "http://"))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	u, err := url.Parse(rawURL)
	if err != nil {
		return 0, err
	}
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", rawURL, u.Host)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// TestEndJobRefusesUntilAssigned: between a job's end and the browser's
// next tenant (its reset, or its app's pool), its page's requests are
// refused without asking the pacer, over http and as tunnels; Assign
// ends that.
func TestEndJobRefusesUntilAssigned(t *testing.T) {
	site := newTarget(t, "127.0.0.1:0")
	e := loopbackEndpoint(t)
	p := &fakePacer{}
	e.SetJob(JobMode{Pacer: p})
	hp := "127.0.0.1:" + site.port
	if code, _ := rawGet(t, e.ProxyURL(), "http://"+hp+"/during"); code != 200 {
		t.Fatalf("during the job: %d", code)
	}
	testutil.Eventually(t, 5*time.Second, func() error {
		if got := p.got(); len(got) != 3 {
			return fmt.Errorf("pacer calls %v", got)
		}
		return nil
	})
	e.EndJob()
	if code, _ := rawGet(t, e.ProxyURL(), "http://"+hp+"/after"); code != http.StatusServiceUnavailable {
		t.Fatalf("after EndJob: %d, want 503", code)
	}
	if code := rawConnect(t, e.ProxyURL(), hp); code != http.StatusServiceUnavailable {
		t.Fatalf("a tunnel after EndJob: %d, want 503", code)
	}
	if site.hits.Load() != 1 || len(p.got()) != 3 {
		t.Fatalf("after EndJob the site saw %d requests, the pacer %v", site.hits.Load(), p.got())
	}
	e.Assign(&Tenant{Allow: mustRules(t, "127.0.0.1")})
	if code, _ := rawGet(t, e.ProxyURL(), "http://"+hp+"/next"); code != 200 || len(p.got()) != 3 {
		t.Fatalf("after Assign: %d, pacer %v", code, p.got())
	}
}

// holdingListener accepts one connection and holds it open until its
// peer closes it (a tunnel's far end); closed with the test.
func holdingListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	return ln
}

// openTunnel asks the proxy for a tunnel to hostport: the connection
// (closed with the test) and the answer.
func openTunnel(t *testing.T, proxy, hostport string) (net.Conn, *http.Response) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(proxy, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", hostport, hostport)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, resp
}

// rawConnect asks the proxy for a tunnel to hostport and returns the
// answer's status.
func rawConnect(t *testing.T, proxy, hostport string) int {
	t.Helper()
	c, resp := openTunnel(t, proxy, hostport)
	resp.Body.Close()
	c.Close()
	return resp.StatusCode
}
