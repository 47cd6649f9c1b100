package egress

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Jobs (docs/jobs.md, "Every request counted"): while a browser runs a
// job, its endpoint holds every request the browser sends to the budget of
// the request's host, which the master keeps for the whole cluster: before
// forwarding, it asks the Pacer for a go; it says when the request was
// written and when it ended. An https request is seen only as its CONNECT
// tunnel: the tunnel is the request (a go when it opens, in flight until
// it closes); what travels inside it is not seen.

// ReasonSubresource: a check loads its document only.
const ReasonSubresource = "subresource"

// ReasonJobOver: a request of a job's page after the job ended, before
// the browser was reset or given back (EndJob).
const ReasonJobOver = "job-over"

// Pacer holds a job browser's requests to their hosts' budgets.
type Pacer interface {
	// Go blocks until request n to hostport may be sent (an error: it may
	// not, the request is refused). doc: the page's document, whose start
	// the job's start gate paced already.
	Go(ctx context.Context, n int64, hostport string, doc bool) error
	// Sent: request n was written (or its tunnel connected) after since
	// its go.
	Sent(n int64, hostport string, doc bool, after time.Duration)
	// End: request n is over (answered, failed, tunnel closed); it must
	// follow every Go that returned nil.
	End(n int64, hostport string)
}

// JobMode is the job an endpoint's browser runs (SetJob).
type JobMode struct {
	Pacer Pacer
	// DocumentOnly: a check without subresources: only the document
	// passes, and the requests its redirects lead to; over https, one
	// tunnel per host (a redirect inside a tunnel is not seen).
	DocumentOnly bool
}

// jobState is an endpoint's current job.
type jobState struct {
	mode JobMode
	n    atomic.Int64
	// ctx ends with the job (ClearJob): requests still waiting for a go
	// stop waiting.
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	redirects map[string]int // DocumentOnly: URLs a redirect allows
	tunneled  map[string]bool
	tunnels   map[net.Conn]struct{}
	ended     bool
}

// SetJob holds the browser's requests to the job's budgets until
// ClearJob.
func (e *Endpoint) SetJob(m JobMode) {
	ctx, cancel := context.WithCancel(context.Background())
	old := e.job.Swap(&jobState{mode: m, ctx: ctx, cancel: cancel,
		redirects: map[string]int{}, tunneled: map[string]bool{}, tunnels: map[net.Conn]struct{}{}})
	if old != nil {
		old.end()
	}
}

// ClearJob ends the job: its open tunnels are cut (they hold slots of
// their hosts' budgets, and the next user must not inherit them).
func (e *Endpoint) ClearJob() {
	if js := e.job.Swap(nil); js != nil {
		js.end()
		e.tr.CloseIdleConnections()
	}
}

// EndJob ends the job as ClearJob does but keeps refusing the browser's
// requests until Assign gives it its next tenant: a job's page still runs
// between the job's end and the browser's reset (or its return to an app's
// pool), and must neither go unpaced nor keep the job's rules.
func (e *Endpoint) EndJob() {
	if js := e.job.Load(); js != nil {
		js.end()
		e.tr.CloseIdleConnections()
	}
}

// end stops the job's waits and cuts its tunnels.
func (js *jobState) end() {
	js.cancel()
	js.mu.Lock()
	js.ended = true
	conns := make([]net.Conn, 0, len(js.tunnels))
	for c := range js.tunnels {
		conns = append(conns, c)
	}
	js.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// claimDocument reports whether a request to host:port is the job's
// document: the first after the start gate's go (OnNextRequest armed).
func (e *Endpoint) claimDocument(host string, port int) bool {
	key := watchKey(net.JoinHostPort(host, strconv.Itoa(port)))
	e.mu.Lock()
	defer e.mu.Unlock()
	w := e.watch[key]
	if w == nil || w.claimed {
		return false
	}
	w.claimed = true
	return true
}

// admit decides and paces one request of the job: release (non-nil when
// the request holds a go) must be called when it is over, sent when it
// was written. ok false: refused (already answered).
func (js *jobState) admit(ctx context.Context, w http.ResponseWriter, e *Endpoint, t *Tenant, target string, hostport string, doc, tunnel bool, u *url.URL) (sent func(), release func(), ok bool) {
	if js.ctx.Err() != nil { // EndJob: over, not yet reassigned
		e.g.blocked(t, ReasonJobOver, target)
		refuse(w, http.StatusServiceUnavailable, target, "the job is over")
		return nil, nil, false
	}
	if js.mode.DocumentOnly && !js.allowed(hostport, doc, tunnel, u) {
		e.g.blocked(t, ReasonSubresource, target)
		refuse(w, http.StatusForbidden, target, "a check loads its document only, unless it asks for subresources")
		return nil, nil, false
	}
	if js.mode.Pacer == nil {
		return func() {}, func() {}, true
	}
	n := js.n.Add(1)
	gctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(js.ctx, cancel)
	err := js.mode.Pacer.Go(gctx, n, hostport, doc)
	stop()
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			refuse(w, http.StatusServiceUnavailable, target, "the job's request budget refused it ("+err.Error()+")")
		}
		return nil, nil, false
	}
	goAt := time.Now()
	var once sync.Once
	sent = func() { once.Do(func() { js.mode.Pacer.Sent(n, hostport, doc, time.Since(goAt)) }) }
	release = func() { js.mode.Pacer.End(n, hostport) }
	return sent, release, true
}

// allowed is DocumentOnly's rule: the document, a redirect's target
// (http), or a first tunnel to its host (https).
func (js *jobState) allowed(hostport string, doc, tunnel bool, u *url.URL) bool {
	js.mu.Lock()
	defer js.mu.Unlock()
	if tunnel {
		first := !js.tunneled[hostport]
		js.tunneled[hostport] = true
		return first || doc
	}
	if doc {
		return true
	}
	k := redirectKey(u)
	if js.redirects[k] > 0 {
		js.redirects[k]--
		return true
	}
	return false
}

// redirected notes a redirect answered to a DocumentOnly job: its target
// may be loaded once.
func (js *jobState) redirected(from *url.URL, res *http.Response) {
	if res.StatusCode < 300 || res.StatusCode > 399 {
		return
	}
	loc, err := from.Parse(res.Header.Get("Location"))
	if err != nil || res.Header.Get("Location") == "" {
		return
	}
	js.mu.Lock()
	defer js.mu.Unlock()
	if loc.Scheme == "https" {
		host, port, err := splitHostPort(loc.Host, 443)
		if err == nil {
			delete(js.tunneled, watchKey(net.JoinHostPort(host, strconv.Itoa(port))))
		}
		return
	}
	js.redirects[redirectKey(loc)]++
}

// trackTunnel keeps a tunnel opened for the job (cut by ClearJob); false:
// the job ended meanwhile.
func (js *jobState) trackTunnel(c net.Conn) bool {
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.ended {
		return false
	}
	js.tunnels[c] = struct{}{}
	return true
}

func (js *jobState) untrackTunnel(c net.Conn) {
	js.mu.Lock()
	delete(js.tunnels, c)
	js.mu.Unlock()
}

// redirectKey is a URL as both a Location and a proxy request spell it:
// scheme and host lower case, default port dropped, no fragment.
func redirectKey(u *url.URL) string {
	if u == nil {
		return ""
	}
	scheme := strings.ToLower(u.Scheme)
	def := 80
	if scheme == "https" {
		def = 443
	}
	host, port, err := splitHostPort(u.Host, def)
	if err != nil {
		return ""
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	q := ""
	if u.RawQuery != "" {
		q = "?" + u.RawQuery
	}
	return scheme + "://" + net.JoinHostPort(normalizeHost(host), strconv.Itoa(port)) + path + q
}

// jobKey carries a DocumentOnly job's state to ModifyResponse, which
// notes its redirects.
type jobKey struct{}
