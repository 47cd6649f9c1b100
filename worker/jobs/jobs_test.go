package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// fakeBrowser answers Load, Capture, Evaluate and Input from its fields;
// with block set, Load waits for it (or ctx).
type fakeBrowser struct {
	browser.Browser // the rest is not used by the executor

	res     browser.LoadResult
	loadErr error
	block   chan struct{}
	text    string
	capture []byte
	evalErr error

	mu      *sync.Mutex // set by the leaser
	resized [2]int
	// exit is the browser's egress endpoint (nil: none); sent and
	// contacted, if set, are when Load says the browser sent the request
	// and the endpoint contacted the site (offsets from the gate's go).
	exit      *fakeExit
	sent      time.Duration
	contacted time.Duration
}

func (b *fakeBrowser) Egress() browser.Egress {
	if b.exit == nil {
		return nil
	}
	return b.exit
}

// fakeExit is an egress endpoint that fires its watcher when told.
type fakeExit struct {
	mu    sync.Mutex
	watch map[string]func(time.Time)
}

func (f *fakeExit) ProxyURL() string { return "http://127.0.0.1:1" }
func (f *fakeExit) Close() error     { return nil }
func (f *fakeExit) OnNextRequest(hostport string, fn func(time.Time)) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.watch == nil {
		f.watch = map[string]func(time.Time){}
	}
	f.watch[hostport] = fn
	return func() { f.mu.Lock(); delete(f.watch, hostport); f.mu.Unlock() }
}

func (f *fakeExit) contact(hostport string, at time.Time) {
	f.mu.Lock()
	fn := f.watch[hostport]
	delete(f.watch, hostport)
	f.mu.Unlock()
	if fn != nil {
		fn(at)
	}
}

func (b *fakeBrowser) Load(ctx context.Context, url string, opts browser.LoadOptions) (browser.LoadResult, error) {
	if opts.BeforeNavigate != nil {
		if err := opts.BeforeNavigate(ctx); err != nil {
			return browser.LoadResult{}, err
		}
	}
	goAt := time.Now()
	if b.sent > 0 && opts.OnRequestSent != nil {
		opts.OnRequestSent(goAt.Add(b.sent))
	}
	if b.contacted > 0 && b.exit != nil {
		hp, _ := hostPort(url) // as the endpoint names it: with the port
		b.exit.contact(hp, goAt.Add(b.contacted))
	}
	if b.block != nil {
		select {
		case <-b.block:
		case <-ctx.Done():
			return browser.LoadResult{}, ctx.Err()
		}
	}
	return b.res, b.loadErr
}

func (b *fakeBrowser) Capture(ctx context.Context, opts browser.CaptureOptions) ([]byte, error) {
	return b.capture, nil
}

func (b *fakeBrowser) Evaluate(ctx context.Context, expr string, out any) error {
	if b.evalErr != nil {
		return b.evalErr
	}
	s := b.text
	if strings.Contains(expr, "outerHTML") {
		s = "<html>" + b.text + "</html>"
	}
	*(out.(*string)) = s
	return nil
}

func (b *fakeBrowser) Input(ctx context.Context, ev browser.InputEvent) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.resized = [2]int{ev.Width, ev.Height}
	return nil
}

type fakeLease struct {
	b        *fakeBrowser
	returned chan struct{}
	once     sync.Once
}

func (l *fakeLease) Browser() browser.Browser { return l.b }
func (l *fakeLease) Return()                  { l.once.Do(func() { close(l.returned) }) }

type fakeLeaser struct {
	b     *fakeBrowser
	err   error
	mu    sync.Mutex
	lease *fakeLease
}

func (l *fakeLeaser) Lease(ctx context.Context, app string, _ []string) (Lease, error) {
	if l.err != nil {
		return nil, l.err
	}
	l.mu.Lock()
	if l.b.mu == nil {
		l.b.mu = new(sync.Mutex)
	}
	defer l.mu.Unlock()
	l.lease = &fakeLease{b: l.b, returned: make(chan struct{})}
	return l.lease, nil
}

type fakeReporter struct {
	mu        sync.Mutex
	working   int
	done      []wire.JobOutcome
	doneCalls int
	failDone  int // the first failDone Done calls fail
	late      int // Working reports after Done
	// gate answers Ready: waits to hand out before "go" (nil = go at
	// once); gateErr, if set, is returned instead.
	gate    []time.Duration
	gateErr error
	readies int
	started []wire.JobStarted
}

func (r *fakeReporter) Started(ctx context.Context, s wire.JobStarted) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started = append(r.started, s)
	return nil
}

func (r *fakeReporter) Ready(ctx context.Context, p wire.JobProgress) (time.Duration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.readies++
	if r.gateErr != nil {
		return 0, r.gateErr
	}
	if len(r.gate) > 0 {
		w := r.gate[0]
		r.gate = r.gate[1:]
		return w, nil
	}
	return 0, nil
}

func (r *fakeReporter) Working(ctx context.Context, p wire.JobProgress) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.working++
	if len(r.done) > 0 {
		r.late++
	}
	return nil
}

func (r *fakeReporter) Done(ctx context.Context, o wire.JobOutcome) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.doneCalls++
	if r.doneCalls <= r.failDone {
		return errors.New("connection lost")
	}
	r.done = append(r.done, o)
	return nil
}

func (r *fakeReporter) outcomes() []wire.JobOutcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]wire.JobOutcome(nil), r.done...)
}

// runOne runs one attempt of spec to its Done.
func runOne(t *testing.T, cfg Config, l *fakeLeaser, spec wire.JobSpec) wire.JobOutcome {
	t.Helper()
	r := &fakeReporter{}
	e := New(cfg, l, r)
	defer e.Close(context.Background())
	if err := e.Start(wire.JobRun{ID: "j1", Attempt: 1, Spec: spec}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, testutil.Cond("Done", func() bool { return len(r.outcomes()) == 1 }))
	out := r.outcomes()[0]
	if out.ID != "j1" || out.Attempt != 1 {
		t.Fatalf("outcome for %s/%d", out.ID, out.Attempt)
	}
	if l.lease != nil {
		select {
		case <-l.lease.returned:
		default:
			t.Fatal("the browser was not returned")
		}
	}
	return out
}

func TestCheckStates(t *testing.T) {
	okHash := hash([]byte("hello"))
	tests := []struct {
		name      string
		b         fakeBrowser
		leaseErr  error
		spec      wire.JobSpec
		check     string
		reason    string
		err       string // substring of Err ("" = none)
		permanent bool
		disallow  bool // the worker's egress guard refused it
	}{
		{name: "ok", b: fakeBrowser{res: browser.LoadResult{Status: 200, Title: "T"}, text: "hello"}, check: wire.CheckOK},
		{name: "redirect final ok", b: fakeBrowser{res: browser.LoadResult{Status: 301}, text: "hello"}, check: wire.CheckOK},
		{name: "same hash", b: fakeBrowser{res: browser.LoadResult{Status: 200}, text: "hello"}, spec: wire.JobSpec{PrevHash: okHash}, check: wire.CheckOK},
		{name: "changed", b: fakeBrowser{res: browser.LoadResult{Status: 200}, text: "hello"}, spec: wire.JobSpec{PrevHash: hash([]byte("old"))}, check: wire.CheckChanged, reason: "content changed"},
		{name: "404", b: fakeBrowser{res: browser.LoadResult{Status: 404}}, check: wire.CheckUnavailable, reason: "HTTP 404"},
		{name: "503", b: fakeBrowser{res: browser.LoadResult{Status: 503}}, check: wire.CheckUnavailable, reason: "HTTP 503"},
		{name: "refused", b: fakeBrowser{loadErr: &browser.UnreachableError{URL: "u", Reason: "connection refused"}}, check: wire.CheckUnavailable, reason: "connection refused"},
		{name: "egress", b: fakeBrowser{loadErr: &browser.UnreachableError{URL: "u", Reason: "blocked by egress guard"}}, disallow: true,
			reason: "http://example.test/: blocked by the worker's egress guard (a redirect or a name leading where jobs may not go)"},
		{name: "timeout", b: fakeBrowser{block: make(chan struct{})}, spec: wire.JobSpec{TimeoutMs: 20}, check: wire.CheckUnavailable, reason: "timed out after 20ms"},
		{name: "no status", b: fakeBrowser{res: browser.LoadResult{Status: 0}}, check: wire.CheckError, reason: "no HTTP status for the page (0)"},
		{name: "unexpected load error", b: fakeBrowser{loadErr: errors.New("weird")}, check: wire.CheckError, reason: "weird"},
		{name: "text unreadable", b: fakeBrowser{res: browser.LoadResult{Status: 200}, evalErr: errors.New("boom")}, check: wire.CheckError, reason: "read the page text: boom"},
		{name: "policy", b: fakeBrowser{loadErr: fmt.Errorf("x: %w", browser.ErrBlocked)}, err: "refused by the navigation policy", permanent: true},
		{name: "crash", b: fakeBrowser{loadErr: fmt.Errorf("x: %w", browser.ErrCrashed)}, err: "browser failed"},
		{name: "lease failed", leaseErr: errors.New("no browser"), err: "lease a browser: no browser"},
		{name: "unknown app", leaseErr: fmt.Errorf("app x: %w", ErrPermanent), err: "lease a browser", permanent: true},
		{name: "invalid selector", b: fakeBrowser{loadErr: fmt.Errorf("x: %w", browser.ErrInvalidSelector)}, err: "waitSelector", permanent: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec
			spec.Kind, spec.URL = wire.JobCheck, "http://example.test/"
			b := tc.b
			out := runOne(t, Config{}, &fakeLeaser{b: &b, err: tc.leaseErr}, spec)
			if tc.err != "" {
				if !strings.Contains(out.Err, tc.err) || out.Permanent != tc.permanent || out.Check != "" {
					t.Fatalf("outcome %+v, want Err ~ %q permanent %v", out, tc.err, tc.permanent)
				}
				return
			}
			if out.Err != "" || out.Check != tc.check || out.Reason != tc.reason || out.Disallowed != tc.disallow {
				t.Fatalf("outcome %+v, want check %q reason %q", out, tc.check, tc.reason)
			}
			if tc.check == wire.CheckOK && out.Hash != okHash {
				t.Fatalf("hash %s, want the SHA-256 of the page text", out.Hash)
			}
		})
	}
}

func TestRender(t *testing.T) {
	png := []byte("\x89PNG fake image")
	tests := []struct {
		name      string
		spec      wire.JobSpec
		cfg       Config
		body      string
		ctype     string
		err       string
		permanent bool
	}{
		{name: "png default", spec: wire.JobSpec{}, body: string(png), ctype: "image/png"},
		{name: "pdf", spec: wire.JobSpec{Format: wire.FormatPDF}, body: string(png), ctype: "application/pdf"},
		{name: "html", spec: wire.JobSpec{Format: wire.FormatHTML}, body: "<html>text</html>", ctype: "text/html; charset=utf-8"},
		{name: "text", spec: wire.JobSpec{Format: wire.FormatText}, body: "text", ctype: "text/plain; charset=utf-8"},
		{name: "over spec limit", spec: wire.JobSpec{MaxBytes: 4}, err: fmt.Sprintf("result too large: %d bytes, the limit is 4 bytes", len(png)), permanent: true},
		{name: "over worker limit", spec: wire.JobSpec{MaxBytes: 1 << 30}, cfg: Config{MaxResultBytes: 5}, err: fmt.Sprintf("result too large: %d bytes, the limit is 5 bytes", len(png)), permanent: true},
		{name: "unknown format", spec: wire.JobSpec{Format: "gif"}, err: `unknown render format "gif"`, permanent: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := &fakeBrowser{res: browser.LoadResult{Status: 200, FinalURL: "http://example.test/x", Title: "T"}, capture: png, text: "text"}
			spec := tc.spec
			spec.Kind, spec.URL, spec.Width, spec.Height = wire.JobRender, "http://example.test/", 320, 200
			out := runOne(t, tc.cfg, &fakeLeaser{b: b}, spec)
			if tc.err != "" {
				if out.Err != tc.err || out.Permanent != tc.permanent || out.Body != nil {
					t.Fatalf("outcome %+v, want Err %q permanent %v and no body", out, tc.err, tc.permanent)
				}
				return
			}
			if out.Err != "" || string(out.Body) != tc.body || out.ContentType != tc.ctype || out.Hash != hash([]byte(tc.body)) {
				t.Fatalf("outcome %+v, want body %q type %q", out, tc.body, tc.ctype)
			}
			if out.Status != 200 || out.FinalURL != "http://example.test/x" || out.Title != "T" {
				t.Fatalf("page facts %+v", out)
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.resized != [2]int{320, 200} {
				t.Fatalf("viewport set to %v, want 320x200", b.resized)
			}
		})
	}
}

// blocked starts one attempt whose Load waits until release is closed.
func blocked(t *testing.T, cfg Config, r *fakeReporter) (*Executor, *fakeLeaser, chan struct{}) {
	t.Helper()
	release := make(chan struct{})
	l := &fakeLeaser{b: &fakeBrowser{block: release, res: browser.LoadResult{Status: 200}, text: "x"}}
	e := New(cfg, l, r)
	if err := e.Start(wire.JobRun{ID: "j1", Attempt: 1, ReportEveryMs: 5, Spec: wire.JobSpec{Kind: wire.JobCheck, URL: "http://example.test/"}}); err != nil {
		t.Fatal(err)
	}
	return e, l, release
}

// TestSlots: a busy executor refuses at once instead of queueing, and a
// slot is free again when the attempt ended.
func TestSlots(t *testing.T) {
	r := &fakeReporter{}
	e, _, release := blocked(t, Config{Slots: 1}, r)
	defer e.Close(context.Background())
	if s := e.Stats(); s != (Stats{Slots: 1, Used: 1, Free: 0}) {
		t.Fatalf("stats %+v", s)
	}
	err := e.Start(wire.JobRun{ID: "j2", Attempt: 1, Spec: wire.JobSpec{Kind: wire.JobCheck, URL: "http://example.test/"}})
	if !errors.Is(err, ErrNoSlot) {
		t.Fatalf("second Start = %v, want ErrNoSlot", err)
	}
	close(release)
	testutil.Eventually(t, 30*time.Second, testutil.Cond("Done", func() bool { return len(r.outcomes()) == 1 }))
	testutil.Eventually(t, 30*time.Second, testutil.Cond("slot free", func() bool { return e.Stats().Free == 1 }))
	if err := e.Start(wire.JobRun{ID: "j2", Attempt: 1, Spec: wire.JobSpec{Kind: wire.JobCheck, URL: "http://example.test/"}}); err != nil {
		t.Fatalf("Start with a free slot = %v", err)
	}
}

// TestProgress: Working goes out every interval while the attempt runs,
// none after Done, and Done exactly once.
func TestProgress(t *testing.T) {
	r := &fakeReporter{}
	e, _, release := blocked(t, Config{}, r)
	testutil.Eventually(t, 30*time.Second, testutil.Cond("two working reports", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.working >= 2 }))
	close(release)
	testutil.Eventually(t, 30*time.Second, testutil.Cond("Done", func() bool { return len(r.outcomes()) == 1 }))
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.done) != 1 || r.late != 0 || r.done[0].Check != wire.CheckOK {
		t.Fatalf("done %+v, %d working reports after Done", r.done, r.late)
	}
}

// TestCancel: a cancelled attempt ends, returns its browser, frees its
// slot and sends no Done.
func TestCancel(t *testing.T) {
	r := &fakeReporter{}
	var ends []string
	var mu sync.Mutex
	e, l, _ := blocked(t, Config{OnEnd: func(kind, result string) { mu.Lock(); ends = append(ends, kind+"/"+result); mu.Unlock() }}, r)
	if err := e.Cancel("j1", 2); err != nil { // another attempt: nothing happens
		t.Fatal(err)
	}
	if e.Stats().Used != 1 {
		t.Fatal("cancelling another attempt stopped this one")
	}
	if err := e.Cancel("j1", 1); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, testutil.Cond("slot free", func() bool { return e.Stats().Used == 0 }))
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-l.lease.returned
	if n := len(r.outcomes()); n != 0 {
		t.Fatalf("%d Done reports for a cancelled attempt", n)
	}
	if len(ends) != 1 || ends[0] != "check/cancelled" {
		t.Fatalf("OnEnd calls %v", ends)
	}
}

// TestClose: Close cancels running attempts, which report a retryable
// failure, and refuses new ones.
func TestClose(t *testing.T) {
	r := &fakeReporter{}
	e, _, _ := blocked(t, Config{}, r)
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	outs := r.outcomes()
	if len(outs) != 1 || !strings.Contains(outs[0].Err, "worker shutting down") || outs[0].Permanent {
		t.Fatalf("outcomes after Close %+v", outs)
	}
	if err := e.Start(wire.JobRun{ID: "j2", Attempt: 1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close = %v", err)
	}
}

// TestDoneRetried: a Done that fails is sent again, boundedly.
func TestDoneRetried(t *testing.T) {
	for _, tc := range []struct {
		fail, calls, delivered int
	}{{fail: 2, calls: 3, delivered: 1}, {fail: 100, calls: 4, delivered: 0}} {
		r := &fakeReporter{failDone: tc.fail}
		e := New(Config{DoneRetries: 4, DoneBackoff: time.Millisecond}, &fakeLeaser{b: &fakeBrowser{res: browser.LoadResult{Status: 200}}}, r)
		if err := e.Start(wire.JobRun{ID: "j", Attempt: 1, Spec: wire.JobSpec{Kind: wire.JobCheck, URL: "http://example.test/"}}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 30*time.Second, testutil.Cond("slot free", func() bool { return e.Stats().Used == 0 }))
		_ = e.Close(context.Background())
		r.mu.Lock()
		if r.doneCalls != tc.calls || len(r.done) != tc.delivered {
			t.Errorf("fail %d: %d Done calls, %d delivered; want %d, %d", tc.fail, r.doneCalls, len(r.done), tc.calls, tc.delivered)
		}
		r.mu.Unlock()
	}
}

func TestSlotsFor(t *testing.T) {
	for _, tc := range []struct{ browsers, slots int }{{0, 1}, {3, 1}, {4, 1}, {64, 16}} {
		if got := SlotsFor(tc.browsers); got != tc.slots {
			t.Errorf("SlotsFor(%d) = %d, want %d", tc.browsers, got, tc.slots)
		}
	}
}

// codedErr is a remote error with an RMI code.
type codedErr struct{ code string }

func (e codedErr) Error() string   { return "remote: " + e.code }
func (e codedErr) RMICode() string { return e.code }

// TestStartGate: the page is loaded only after the master's start gate
// says go; waits are honoured, transient errors retried, and an attempt the
// master no longer knows ends without loading.
func TestStartGate(t *testing.T) {
	spec := wire.JobSpec{Kind: wire.JobCheck, URL: "http://example.test/"}
	t.Run("waits then goes", func(t *testing.T) {
		r := &fakeReporter{gate: []time.Duration{30 * time.Millisecond, 20 * time.Millisecond}}
		b := &fakeBrowser{res: browser.LoadResult{Status: 200}, text: "x"}
		e := New(Config{}, &fakeLeaser{b: b}, r)
		defer e.Close(context.Background())
		if err := e.Start(wire.JobRun{ID: "j", Attempt: 1, Spec: spec}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 30*time.Second, testutil.Cond("Done", func() bool { return len(r.outcomes()) == 1 }))
		out := r.outcomes()[0]
		r.mu.Lock()
		readies := r.readies
		r.mu.Unlock()
		if readies != 3 || out.Check != wire.CheckOK || out.Timings.GateMs < 50 {
			t.Fatalf("readies %d, outcome %+v", readies, out)
		}
	})
	t.Run("stale attempt", func(t *testing.T) {
		r := &fakeReporter{gateErr: codedErr{wire.CodeInvalid}}
		b := &fakeBrowser{loadErr: errors.New("must not load")}
		e := New(Config{}, &fakeLeaser{b: b}, r)
		defer e.Close(context.Background())
		if err := e.Start(wire.JobRun{ID: "j", Attempt: 1, Spec: spec}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 30*time.Second, testutil.Cond("Done", func() bool { return len(r.outcomes()) == 1 }))
		if out := r.outcomes()[0]; !strings.Contains(out.Err, "start gate") {
			t.Fatalf("outcome %+v", out)
		}
	})
}

// TestStartGateOlderMaster: a master without the start gate answers "no
// such method": the attempt goes on at once.
// TestStartedFromTheEndpoint: the start time reported to the master is
// when the browser's egress endpoint contacted the site, later than the
// browser's own "sent" on a loaded machine; without an endpoint, or for an
// https request through a tunnel opened before, the browser's time is used.
func TestStartedFromTheEndpoint(t *testing.T) {
	const sent, contacted = 10 * time.Millisecond, 700 * time.Millisecond
	for _, tc := range []struct {
		name      string
		url       string
		exit      bool
		contacted time.Duration
		want      time.Duration
	}{
		{"http through the endpoint", "http://example.test:8080/a", true, contacted, contacted},
		{"https, new tunnel", "https://example.test/a", true, contacted, contacted},
		{"https through an open tunnel", "https://example.test/a", true, 0, sent},
		{"no endpoint", "http://example.test/a", false, 0, sent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &fakeBrowser{res: browser.LoadResult{Status: 200}, text: "x", sent: sent, contacted: tc.contacted}
			if tc.exit {
				b.exit = &fakeExit{}
			}
			r := &fakeReporter{}
			e := New(Config{}, &fakeLeaser{b: b}, r)
			defer e.Close(context.Background())
			if err := e.Start(wire.JobRun{ID: "j", Attempt: 1, Spec: wire.JobSpec{Kind: wire.JobCheck, URL: tc.url}}); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, 30*time.Second, testutil.Cond("Done", func() bool { return len(r.outcomes()) == 1 }))
			r.mu.Lock()
			defer r.mu.Unlock()
			if len(r.started) != 1 {
				t.Fatalf("started reports %+v, want 1", r.started)
			}
			// The go time is taken a moment before the fake's: allow that.
			if d := time.Duration(r.started[0].DelayNs); d < tc.want || d > tc.want+200*time.Millisecond {
				t.Fatalf("reported delay %v, want about %v", d, tc.want)
			}
		})
	}
}

func TestStartGateOlderMaster(t *testing.T) {
	r := &fakeReporter{gateErr: codedErr{"rmi.no_method"}}
	out := runOneWith(t, r, wire.JobSpec{Kind: wire.JobCheck, URL: "http://example.test/"})
	if out.Check != wire.CheckOK {
		t.Fatalf("outcome %+v", out)
	}
}

func runOneWith(t *testing.T, r *fakeReporter, spec wire.JobSpec) wire.JobOutcome {
	t.Helper()
	e := New(Config{}, &fakeLeaser{b: &fakeBrowser{res: browser.LoadResult{Status: 200}, text: "x"}}, r)
	defer e.Close(context.Background())
	if err := e.Start(wire.JobRun{ID: "j", Attempt: 1, Spec: spec}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, testutil.Cond("Done", func() bool { return len(r.outcomes()) == 1 }))
	return r.outcomes()[0]
}
