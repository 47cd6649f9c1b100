package jobs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

func TestValidate(t *testing.T) {
	render := func(f func(*wire.JobSpec)) wire.JobSpec {
		s := wire.JobSpec{Kind: wire.JobRender, URL: "https://example.com/a?b=c"}
		f(&s)
		return s
	}
	for _, tc := range []struct {
		name  string
		spec  wire.JobSpec
		field string // "" = valid
	}{
		{"render ok", render(func(*wire.JobSpec) {}), ""},
		{"check ok", wire.JobSpec{Kind: wire.JobCheck, URL: "http://example.com"}, ""},
		{"kind missing", wire.JobSpec{URL: "http://x"}, "kind"},
		{"kind bad", wire.JobSpec{Kind: "crawl", URL: "http://x"}, "kind"},
		{"url missing", render(func(s *wire.JobSpec) { s.URL = "" }), "url"},
		{"url relative", render(func(s *wire.JobSpec) { s.URL = "/a/b" }), "url"},
		{"url unparseable", render(func(s *wire.JobSpec) { s.URL = "http://[::1" }), "url"},
		{"url no host", render(func(s *wire.JobSpec) { s.URL = "http:///path" }), "url"},
		{"url opaque", render(func(s *wire.JobSpec) { s.URL = "mailto:a@b.c" }), "url"},
		{"other scheme is not an input error", render(func(s *wire.JobSpec) { s.URL = "ftp://example.com/" }), ""},
		{"format bad", render(func(s *wire.JobSpec) { s.Format = "gif" }), "format"},
		{"format each", render(func(s *wire.JobSpec) { s.Format = wire.FormatText }), ""},
		{"format on check", wire.JobSpec{Kind: wire.JobCheck, URL: "http://x", Format: "png"}, "format"},
		{"width small", render(func(s *wire.JobSpec) { s.Width = 99 }), "width"},
		{"width big", render(func(s *wire.JobSpec) { s.Width = 4097 }), "width"},
		{"width ok", render(func(s *wire.JobSpec) { s.Width = 100 }), ""},
		{"height negative", render(func(s *wire.JobSpec) { s.Height = -1 }), "height"},
		{"quality range", render(func(s *wire.JobSpec) { s.Format, s.Quality = "jpeg", 101 }), "quality"},
		{"quality png", render(func(s *wire.JobSpec) { s.Quality = 80 }), "quality"},
		{"quality jpeg", render(func(s *wire.JobSpec) { s.Format, s.Quality = "jpeg", 80 }), ""},
		{"wait delay", render(func(s *wire.JobSpec) { s.WaitDelayMs = 60001 }), "waitDelayMs"},
		{"timeout", render(func(s *wire.JobSpec) { s.TimeoutMs = 120001 }), "timeoutMs"},
		{"timeout negative", render(func(s *wire.JobSpec) { s.TimeoutMs = -5 }), "timeoutMs"},
		{"max age", render(func(s *wire.JobSpec) { s.MaxAgeMs = -1 }), "maxAgeMs"},
		{"ignoreRobots render", render(func(s *wire.JobSpec) { s.IgnoreRobots = true }), ""},
		{"ignoreRobots check", wire.JobSpec{Kind: wire.JobCheck, URL: "http://x", IgnoreRobots: true}, "ignoreRobots"},
		{"subresources check", wire.JobSpec{Kind: wire.JobCheck, URL: "http://x", Subresources: true}, ""},
		{"subresources render", render(func(s *wire.JobSpec) { s.Subresources = true }), "subresources"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.spec)
			var fe *FieldError
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("valid spec refused: %v", err)
			case tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field):
				t.Fatalf("err = %v, want a FieldError on %q", err, tc.field)
			}
		})
	}
	check := wire.JobSpec{Kind: wire.JobCheck, URL: "http://x"}
	for _, tc := range []struct {
		every time.Duration
		ok    bool
	}{{9 * time.Second, false}, {10 * time.Second, true}, {30 * 24 * time.Hour, true}, {31 * 24 * time.Hour, false}} {
		err := ValidateMonitor(check, tc.every)
		var fe *FieldError
		if tc.ok != (err == nil) || (!tc.ok && (!errors.As(err, &fe) || fe.Field != "interval")) {
			t.Errorf("interval %v: %v", tc.every, err)
		}
	}
	if err := ValidateMonitor(wire.JobSpec{Kind: wire.JobRender, URL: "http://x", IgnoreRobots: true}, time.Minute); err == nil {
		t.Error("a monitor may not ignore robots.txt")
	}
	// A batch names the index.
	_, err := AdmitBatch([]wire.JobSpec{{Kind: wire.JobCheck, URL: "http://x"}, {Kind: wire.JobRender, URL: "http://x", Width: 5}})
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "jobs[1].width" {
		t.Fatalf("batch: %v", err)
	}
}

func TestParseRobots(t *testing.T) {
	const file = `
# comment
User-agent: *
Disallow: /private
Allow: /private/open
Disallow: /*.pdf$
Disallow: /search?q=*

User-agent: OtherBot
Disallow: /

User-agent: cloudbrowser
User-agent: friend
Disallow: /nobots
Allow: /nobots/yes
Disallow: /a*b$
Sitemap: https://example.com/sitemap.xml
Disallow: /page$
`
	ours := ParseRobots([]byte(file), UserAgentToken)
	star := ParseRobots([]byte(file), "SomeoneElse")
	for _, tc := range []struct {
		r    *Robots
		path string
		want bool
	}{
		{ours, "/", true},
		{ours, "/private", true}, // our group replaces "*"
		{ours, "/nobots", false},
		{ours, "/nobots/x", false},
		{ours, "/nobots/yes/1", true}, // longer Allow wins
		{ours, "/axxb", false},
		{ours, "/axxbc", true}, // $ anchors
		{ours, "/page", false},
		{ours, "/page2", true},
		{ours, "/robots.txt", true},
		{star, "/private/x", false},
		{star, "/private/open/x", true},
		{star, "/doc.pdf", false},
		{star, "/doc.pdf?x", true},
		{star, "/search?q=cats", false},
		{star, "/search", true},
		{ParseRobots([]byte("User-agent: OtherBot\nDisallow: /\n"), UserAgentToken), "/x", true}, // no group for us
		{ParseRobots([]byte("User-agent: *\nDisallow:\n"), UserAgentToken), "/x", true},          // empty Disallow
		{ParseRobots([]byte("User-agent: *\nDisallow: /\nAllow: /$\n"), UserAgentToken), "/", true},
		{ParseRobots([]byte("User-agent: *\nDisallow: /\nAllow: /$\n"), UserAgentToken), "/x", false},
		{ParseRobots([]byte("user-agent: *\ndisallow: /x\nallow: /x\n"), UserAgentToken), "/x", true}, // tie: allow
		{ParseRobots(nil, UserAgentToken), "/x", true},
	} {
		if got := tc.r.Allowed(tc.path); got != tc.want {
			t.Errorf("Allowed(%q) = %v, want %v", tc.path, got, tc.want)
		}
	}
}

// robots.txt is obeyed for checks and monitors, for renders unless the
// request asks otherwise; fetched once per host while cached; 4xx allows,
// 5xx and unreachable disallow for a short time.
func TestRobotsObeyed(t *testing.T) {
	e := newEnv(t, nil)
	e.robots["a.test:80"] = robotsAnswer{body: "User-agent: *\nDisallow: /private\n", status: 200}
	e.robots["down.test:80"] = robotsAnswer{status: 503}
	e.robots["gone.test:80"] = robotsAnswer{status: 410}
	e.robots["err.test:443"] = robotsAnswer{err: errors.New("connection refused")}
	for _, tc := range []struct {
		spec       wire.JobSpec
		want, code string
	}{
		{wire.JobSpec{Kind: wire.JobCheck, URL: "http://a.test/private/x"}, wire.JobDisallowed, DisallowRobots},
		{wire.JobSpec{Kind: wire.JobCheck, URL: "http://a.test/public"}, wire.JobQueued, ""},
		{wire.JobSpec{Kind: wire.JobRender, URL: "http://a.test/private/x"}, wire.JobDisallowed, DisallowRobots},
		{wire.JobSpec{Kind: wire.JobRender, URL: "http://a.test/private/x", IgnoreRobots: true}, wire.JobQueued, ""},
		{wire.JobSpec{Kind: wire.JobCheck, URL: "http://down.test/"}, wire.JobDisallowed, DisallowRobotsError},
		{wire.JobSpec{Kind: wire.JobCheck, URL: "http://gone.test/anything"}, wire.JobQueued, ""},
		{wire.JobSpec{Kind: wire.JobCheck, URL: "https://err.test/"}, wire.JobDisallowed, DisallowRobotsError},
	} {
		j := e.submit(tc.spec)
		if j.State != tc.want || j.Disallow != tc.code {
			t.Errorf("%s %s (ignore %v): %s/%s %q", tc.spec.Kind, tc.spec.URL, tc.spec.IgnoreRobots, j.State, j.Disallow, j.Reason)
		}
	}
	if n := e.fetch["http://a.test:80"]; n != 1 {
		t.Fatalf("robots.txt of a.test fetched %d times, want 1 (cached)", n)
	}
	// After the TTL it is fetched again; an error is kept for less.
	e.robots["down.test:80"] = robotsAnswer{body: "", status: 200}
	e.clock.Advance(DefaultConfig().RobotsErrorTTL)
	if j := e.check("http://down.test/"); j.State != wire.JobQueued {
		t.Fatalf("after the error TTL: %s %s", j.State, j.Reason)
	}
	e.check("http://a.test/public")
	if n := e.fetch["http://a.test:80"]; n != 1 {
		t.Fatalf("a.test fetched again before its TTL (%d)", n)
	}
	e.clock.Advance(time.Hour)
	e.check("http://a.test/public")
	if n := e.fetch["http://a.test:80"]; n != 2 {
		t.Fatalf("a.test not fetched again after its TTL (%d)", n)
	}
}

// The default robots fetcher refuses addresses jobs may not reach.
func TestDefaultRobotsFetcherRefusesLocal(t *testing.T) {
	d := &decider{}
	f := defaultRobotsFetcher(d.addrAllowed)
	_, _, err := f(context.Background(), "http", "127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "refused: loopback") {
		t.Fatalf("err = %v", err)
	}
}

// Restart from a bbolt file: queued stay queued in order, working go back
// to the queue with a lost attempt, finished are kept with their results,
// monitors survive.
func TestRestartFromStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), state.FileName)
	e := newEnvOn(t, path, nil)
	e.q.Workers().Set("w", 1)
	done := e.submit(wire.JobSpec{Kind: wire.JobRender, URL: "http://a.test/done"})
	l := e.pump()
	if err := e.done(l[0], wire.JobOutcome{Body: []byte("bytes"), ContentType: "image/png"}); err != nil {
		t.Fatal(err)
	}
	working := e.check("http://a.test/working")
	if l = e.pump(); len(l) != 1 || l[0].run.ID != working.ID {
		t.Fatal("not working")
	}
	q1 := e.check("http://b.test/1")
	q2 := e.check("http://a.test/2")
	mon, err := e.q.Monitors().Add(context.Background(), monitorSpec(t, wire.JobSpec{Kind: wire.JobCheck, URL: "http://c.test/"}), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// "kill -9": the store is closed without anything else.
	e.st.Close()
	st, err := state.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	e.st = st
	t.Cleanup(func() { st.Close() })
	e.runner.take()
	e.q = e.open(nil)
	got, _ := e.q.Get(working.ID)
	if got.State != wire.JobQueued || len(got.Attempts) != 1 || got.Attempts[0].Err != "master restarted" {
		t.Fatalf("working after restart: %+v", got)
	}
	if body, ct, err := e.q.Result(done.ID); err != nil || string(body) != "bytes" || ct != "image/png" {
		t.Fatalf("done after restart: %q %q %v", body, ct, err)
	}
	if _, err := e.q.Monitors().Get(mon.ID); err != nil {
		t.Fatal("monitor lost")
	}
	// The old attempt's report is ignored.
	if err := e.done(l[0], wire.JobOutcome{}); !errors.Is(err, ErrStaleReport) {
		t.Fatalf("old attempt's report: %v", err)
	}
	e.q.Workers().Set("w", 10)
	var ids []string
	for _, l := range e.tick() {
		ids = append(ids, l.run.ID)
		if l.run.ID == working.ID && l.run.Attempt != 2 {
			t.Fatalf("retry attempt = %d", l.run.Attempt)
		}
	}
	if len(ids) != 4 { // working, q1, q2, and the monitor's job
		t.Fatalf("started %d after restart, want 4", len(ids))
	}
	for _, id := range []string{working.ID, q1.ID, q2.ID} {
		if e.state(id) != wire.JobWorking {
			t.Fatalf("%s not started", id)
		}
	}
}

func TestMetrics(t *testing.T) {
	e := newEnv(t, nil)
	reg := prometheus.NewRegistry()
	for _, c := range e.q.Collectors() {
		reg.MustRegister(c)
	}
	e.q.Workers().Set("w", 3)
	e.check("ftp://x/")
	e.check("http://a.test/1")
	e.check("http://a.test/2")
	l := e.pump()
	if err := e.done(l[0], wire.JobOutcome{Check: wire.CheckOK}); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, lp := range m.GetLabel() {
				key += "," + lp.GetName() + "=" + lp.GetValue()
			}
			switch {
			case m.Counter != nil:
				got[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				got[key] = m.Gauge.GetValue()
			case m.Histogram != nil:
				got[key] = float64(m.Histogram.GetSampleCount())
			}
		}
	}
	for k, v := range map[string]float64{
		"cloudbrowser_jobs_total,kind=check,outcome=disallowed": 1,
		"cloudbrowser_jobs_total,kind=check,outcome=done":       1,
		"cloudbrowser_job_slots,state=free,worker=w":            2,
		"cloudbrowser_job_slots,state=used,worker=w":            1,
		"cloudbrowser_jobs_queued,class=leftover":               0,
		"cloudbrowser_job_wait_seconds":                         2,
		"cloudbrowser_job_run_seconds":                          1,
	} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	s := e.q.Stats()
	if s.Outcomes[wire.JobDone] != 1 || s.Working != 1 || s.Queued["leftover"] != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

// The default fetcher reaches an address AllowAddrs names, and reads it.
func TestDefaultRobotsFetcherAllowed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/robots.txt" || r.Header.Get("User-Agent") != UserAgentToken {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, "User-agent: *\nDisallow: /x\n")
	}))
	defer srv.Close()
	hp := strings.TrimPrefix(srv.URL, "http://")
	e := newEnv(t, func(c *Config) { c.AllowAddrs = []string{hp}; c.Robots = nil })
	if j := e.check(srv.URL + "/x"); j.State != wire.JobDisallowed || j.Disallow != DisallowRobots {
		t.Fatalf("/x: %s %s %q", j.State, j.Disallow, j.Reason)
	}
	if j := e.check(srv.URL + "/y"); j.State != wire.JobQueued {
		t.Fatalf("/y: %s %q", j.State, j.Reason)
	}
}

// TestRecord: a render answered from the cache is a job like any other:
// done at once, listed, with its result.
func TestRecord(t *testing.T) {
	e := newEnv(t, nil)
	spec := wire.JobSpec{Kind: wire.JobRender, URL: "http://a.test/", Format: wire.FormatText}
	j, err := e.q.Record(context.Background(), admit(t, spec), wire.JobOutcome{ContentType: "text/plain", Body: []byte("cached")})
	if err != nil || j.State != wire.JobDone {
		t.Fatalf("Record: %+v %v", j, err)
	}
	body, ctype, err := e.q.Result(j.ID)
	if err != nil || string(body) != "cached" || ctype != "text/plain" {
		t.Fatalf("result: %q %q %v", body, ctype, err)
	}
	if list, _ := e.q.List(ListOptions{State: wire.JobDone}); len(list) != 1 || list[0].ID != j.ID {
		t.Fatalf("list: %+v", list)
	}
	if _, err := e.q.Record(context.Background(), Spec{}, wire.JobOutcome{}); !errors.Is(err, ErrUnchecked) {
		t.Fatalf("an unchecked spec was recorded: %v", err)
	}
	if got := e.q.ListAll(wire.JobQueued, wire.JobWorking); len(got) != 0 {
		t.Fatalf("ListAll: %+v", got)
	}
}
