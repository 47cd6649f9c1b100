package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/rendercache"
)

// key is the cache's own signature, as the master passes it to CacheKey.
var key = CacheKey(func(s wire.JobSpec) (string, string, error) {
	return rendercache.Key(s, false, rendercache.DefaultIgnoreParams)
})

// Equivalent specs are admitted as the same spec with the same signature.
func TestAdmitNormalizes(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b wire.JobSpec
		opts []AdmitOption
		same bool // b's wire spec equals a's (else only the signatures must)
	}{
		{"format png by default",
			wire.JobSpec{Kind: wire.JobRender, URL: "http://a/"},
			wire.JobSpec{Kind: wire.JobRender, URL: "http://a/", Format: wire.FormatPNG}, []AdmitOption{key}, true},
		{"default timeout",
			wire.JobSpec{Kind: wire.JobCheck, URL: "http://a/"},
			wire.JobSpec{Kind: wire.JobCheck, URL: "http://a/", TimeoutMs: DefaultTimeout}, nil, true},
		{"cache fields a client sent are dropped",
			wire.JobSpec{Kind: wire.JobRender, URL: "http://a/"},
			wire.JobSpec{Kind: wire.JobRender, URL: "http://a/", CacheSig: "forged", CacheHolder: "h"}, []AdmitOption{key}, true},
		{"another spelling of the URL: one signature",
			wire.JobSpec{Kind: wire.JobRender, URL: "http://a/p?x=1&y=2"},
			wire.JobSpec{Kind: wire.JobRender, URL: "HTTP://A:80/p?y=2&x=1&utm_source=n#top"}, []AdmitOption{key}, false},
		{"options that do not change the bytes: one signature",
			wire.JobSpec{Kind: wire.JobRender, URL: "http://a/"},
			wire.JobSpec{Kind: wire.JobRender, URL: "http://a/", TimeoutMs: 5000, MaxAgeMs: 9, NoCache: true}, []AdmitOption{key}, false},
		{"a monitor's render is NoCache",
			wire.JobSpec{Kind: wire.JobRender, URL: "http://a/", NoCache: true},
			wire.JobSpec{Kind: wire.JobRender, URL: "http://a/"}, []AdmitOption{AsMonitor()}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Admit(tc.a, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			b, err := Admit(tc.b, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if tc.same && a != b {
				t.Fatalf("admitted differently:\n%+v\n%+v", a, b)
			}
			if a.Signature() != b.Signature() || a.CanonicalURL() != b.CanonicalURL() {
				t.Fatalf("signatures differ: %s %s, %s %s", a.Signature(), a.CanonicalURL(), b.Signature(), b.CanonicalURL())
			}
			if w := a.Wire(); w.TimeoutMs != DefaultTimeout || w.CacheSig != "" || w.CacheHolder != "" ||
				(w.Kind == wire.JobRender && w.Format != wire.FormatPNG) {
				t.Fatalf("not normalized: %+v", w)
			}
		})
	}
}

// What is signed: the cache's own signature, for cached renders only.
func TestAdmitSignature(t *testing.T) {
	render := wire.JobSpec{Kind: wire.JobRender, URL: "http://a/", User: "alice"}
	want, canon, err := rendercache.Key(render, false, rendercache.DefaultIgnoreParams)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		spec wire.JobSpec
		opts []AdmitOption
		sig  string
	}{
		{"render with CacheKey", render, []AdmitOption{key}, want},
		{"render without", render, nil, ""},
		{"check", wire.JobSpec{Kind: wire.JobCheck, URL: "http://a/"}, []AdmitOption{key}, ""},
		// A render monitor's job is keyed as an on-demand render (it warms
		// the cache), and still runs whatever is cached.
		{"monitor", render, []AdmitOption{key, AsMonitor()}, want},
		{"monitor without CacheKey", render, []AdmitOption{AsMonitor()}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := admit(t, tc.spec, tc.opts...)
			if s.Signature() != tc.sig || (tc.sig != "" && s.CanonicalURL() != canon) {
				t.Fatalf("signature %q %q, want %q %q", s.Signature(), s.CanonicalURL(), tc.sig, canon)
			}
			w := s.WithHolder("h").Wire()
			if w.CacheSig != tc.sig || w.CacheHolder != "h" {
				t.Fatalf("WithHolder: %q %q", w.CacheSig, w.CacheHolder)
			}
		})
	}
}

// Each bad field is named, as the API's 400 answers it.
func TestAdmitRefuses(t *testing.T) {
	render := func(f func(*wire.JobSpec)) wire.JobSpec {
		s := wire.JobSpec{Kind: wire.JobRender, URL: "http://a/"}
		f(&s)
		return s
	}
	for _, tc := range []struct {
		name  string
		spec  wire.JobSpec
		opts  []AdmitOption
		field string
		msg   string // in the error; "" = any
	}{
		{"kind", wire.JobSpec{URL: "http://a/"}, nil, "kind", "missing"},
		{"url", render(func(s *wire.JobSpec) { s.URL = "/rel" }), nil, "url", "not an absolute URL"},
		{"url the cache cannot key", render(func(s *wire.JobSpec) { s.URL = "ftp:///x" }), []AdmitOption{key},
			"url", `url: "ftp:///x" is not an absolute URL with a host`},
		{"format", render(func(s *wire.JobSpec) { s.Format = "gif" }), nil, "format", ""},
		{"width", render(func(s *wire.JobSpec) { s.Width = 5 }), nil, "width", ""},
		{"height", render(func(s *wire.JobSpec) { s.Height = 5000 }), nil, "height", ""},
		{"quality", render(func(s *wire.JobSpec) { s.Quality = 50 }), nil, "quality", "jpeg only"},
		{"waitSelector", render(func(s *wire.JobSpec) { s.WaitSelector = strings.Repeat("x", 1025) }), nil, "waitSelector", ""},
		{"waitDelayMs", render(func(s *wire.JobSpec) { s.WaitDelayMs = -1 }), nil, "waitDelayMs", ""},
		{"timeoutMs", render(func(s *wire.JobSpec) { s.TimeoutMs = MaxTimeoutMs + 1 }), nil, "timeoutMs", ""},
		{"maxAgeMs", render(func(s *wire.JobSpec) { s.MaxAgeMs = -1 }), nil, "maxAgeMs", ""},
		{"ignoreRobots on a check", wire.JobSpec{Kind: wire.JobCheck, URL: "http://a/", IgnoreRobots: true}, nil,
			"ignoreRobots", "only an explicitly requested render"},
		{"ignoreRobots on a monitor's check", wire.JobSpec{Kind: wire.JobCheck, URL: "http://a/", IgnoreRobots: true}, []AdmitOption{AsMonitor()},
			"ignoreRobots", "monitors always obey robots.txt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Admit(tc.spec, tc.opts...)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want a FieldError on %q saying %q", err, tc.field, tc.msg)
			}
		})
	}
	_, err := Admit(render(func(s *wire.JobSpec) { s.URL = "ftp:///x" }), key)
	if !errors.Is(err, rendercache.ErrBadURL) {
		t.Errorf("the key's error is not wrapped: %v", err)
	}
}

func TestAdmitBatch(t *testing.T) {
	ok := wire.JobSpec{Kind: wire.JobCheck, URL: "http://a/"}
	bad := wire.JobSpec{Kind: wire.JobCheck, URL: "http://a/", Format: "png"}
	for _, tc := range []struct {
		name  string
		specs []wire.JobSpec
		field string // "" = admitted
	}{
		{"empty", nil, "jobs"},
		{"one bad: its own name", []wire.JobSpec{bad}, "format"},
		{"several: the index", []wire.JobSpec{ok, ok, bad}, "jobs[2].format"},
		{"all good", []wire.JobSpec{ok, ok}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := AdmitBatch(tc.specs)
			var fe *FieldError
			switch {
			case tc.field == "" && (err != nil || len(out) != len(tc.specs)):
				t.Fatalf("%d admitted, %v", len(out), err)
			case tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field):
				t.Fatalf("err = %v, want a FieldError on %q", err, tc.field)
			}
		})
	}
}

// Submit cannot be reached with an unchecked spec: it takes a Spec, which
// only Admit makes (its fields are unexported, and a wire.JobSpec does not
// convert to it), so the compiler refuses anything else; these lines only
// pin the signatures. The zero Spec is the one other value, refused at run
// time.
var (
	_ func(*Queue, context.Context, Spec) (Job, error)                       = (*Queue).Submit
	_ func(*Queue, context.Context, []Spec) ([]Job, error)                   = (*Queue).SubmitBatch
	_ func(*Queue, context.Context, Spec, wire.JobOutcome) (Job, error)      = (*Queue).Record
	_ func(*Monitors, context.Context, Spec, time.Duration) (Monitor, error) = (*Monitors).Add
)

func TestUncheckedRefused(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	check := wire.JobSpec{Kind: wire.JobCheck, URL: "http://a.test/"}
	for name, err := range map[string]error{
		"Submit":                second(e.q.Submit(ctx, Spec{})),
		"SubmitBatch":           second(e.q.SubmitBatch(ctx, []Spec{admit(t, check), {}})),
		"Record":                second(e.q.Record(ctx, Spec{}, wire.JobOutcome{})),
		"Monitors.Add":          second(e.q.Monitors().Add(ctx, Spec{}, time.Hour)),
		"Monitors.Add, not one": second(e.q.Monitors().Add(ctx, admit(t, check), time.Hour)),
	} {
		if !errors.Is(err, ErrUnchecked) {
			t.Errorf("%s: %v, want ErrUnchecked", name, err)
		}
	}
	if l, _ := e.q.List(ListOptions{}); len(l) != 0 {
		t.Fatalf("unchecked jobs stored: %+v", l)
	}
}

func second[T any](_ T, err error) error { return err }

// Several monitors due at once each submit their own spec.
func TestMonitorsSubmitTheirOwnSpecs(t *testing.T) {
	e := newEnv(t, nil)
	e.q.Workers().Set("w", 50)
	want := map[string]string{}
	for i := range 8 {
		u := fmt.Sprintf("http://m%d.test/", i)
		m, err := e.q.Monitors().Add(context.Background(), monitorSpec(t, wire.JobSpec{Kind: wire.JobCheck, URL: u}), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		want[m.ID] = u
	}
	if l := e.tick(); len(l) != len(want) {
		t.Fatalf("%d jobs started, want %d", len(l), len(want))
	}
	for id, u := range want {
		m, _ := e.q.Monitors().Get(id)
		j, err := e.q.Get(m.LastJob)
		if err != nil || j.Spec.URL != u || j.Monitor != id {
			t.Errorf("monitor %s (%s): job %+v %v", id, u, j, err)
		}
	}
}
