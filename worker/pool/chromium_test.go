package pool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"

	"github.com/cloudbrowser-go/cloudbrowser/internal/sequence"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium"
	"github.com/cloudbrowser-go/cloudbrowser/worker/seqrun"
)

// site is a small web application with sessions: a login form that sets a
// session cookie, a search page and results that need it, and sessions
// that expire after idle without a request.
type site struct {
	idle time.Duration

	mu       sync.Mutex
	sessions map[string]time.Time // sid → last request
	logins   int
}

const sitePassword = `pa55"word`

func (s *site) Logins() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logins
}

// session checks and refreshes the request's session.
func (s *site) session(r *http.Request) bool {
	c, err := r.Cookie("sid")
	if err != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	last, ok := s.sessions[c.Value]
	if !ok || time.Since(last) > s.idle {
		delete(s.sessions, c.Value)
		return false
	}
	s.sessions[c.Value] = time.Now()
	return true
}

func (s *site) handler() http.Handler {
	mux := http.NewServeMux()
	page := func(w http.ResponseWriter, title, body string) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		fmt.Fprintf(w, "<!doctype html><title>%s</title><body>%s</body>", title, body)
	}
	mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) {
		page(w, "Login", `<form method=post action=/login><input id=user name=user>
<input id=pass name=pass type=password><button id=go>Log in</button></form>`)
	})
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("user") != "demo" || r.FormValue("pass") != sitePassword {
			page(w, "Denied", "wrong user or password")
			return
		}
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		sid := hex.EncodeToString(b)
		s.mu.Lock()
		s.sessions[sid] = time.Now()
		s.logins++
		s.mu.Unlock()
		http.SetCookie(w, &http.Cookie{Name: "sid", Value: sid, Path: "/", HttpOnly: true})
		http.Redirect(w, r, "/search", http.StatusSeeOther)
	})
	mux.HandleFunc("GET /search", func(w http.ResponseWriter, r *http.Request) {
		if !s.session(r) {
			http.Redirect(w, r, "/login", http.StatusSeeOther)
			return
		}
		page(w, "Search", `<p>logged in as <b id=who>demo</b></p><form action=/results><input id=q name=q></form>`)
	})
	mux.HandleFunc("GET /results", func(w http.ResponseWriter, r *http.Request) {
		if !s.session(r) {
			http.Redirect(w, r, "/login", http.StatusSeeOther)
			return
		}
		page(w, "Results", `<p id=res>results for `+r.FormValue("q")+`</p><a href=/search>new search</a>`)
	})
	return mux
}

// TestChromiumPool runs the pool on real Chromium against the site: the
// init sequence logs in, a lease lands on the search page logged in, back
// returns to it, touch keeps the session alive past its idle timeout, and
// TTL recycling keeps the login on a fresh browser context.
func TestChromiumPool(t *testing.T) {
	testutil.NeedChromium(t)
	if testing.Short() {
		t.Skip("short")
	}
	st := &site{idle: 2 * time.Second, sessions: map[string]time.Time{}}
	srv := httptest.NewServer(st.handler())
	defer srv.Close()
	log := testutil.Logger(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := chromium.New(ctx, chromium.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	m, err := NewManager(ManagerConfig{
		Types:   map[string]BrowserType{TypeChromium: {Factory: rt, Max: 6}},
		Runner:  &seqrun.Runner{Secrets: sequence.MapSecrets(map[string]string{"DEMO_PASSWORD": sitePassword}), Log: log},
		Logger:  log,
		Options: func(string) (browser.Options, error) { return browser.Options{Width: 800, Height: 600}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := m.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()

	// The manifest form of the configuration, as an app would write it.
	var c Config
	raw := fmt.Sprintf(`{
	  "enabled": true, "minSize": 1, "maxSize": 2,
	  "init": [
	    {"navigate": %q},
	    {"type": "#user", "text": "demo"},
	    {"type": "#pass", "text": "${secret:DEMO_PASSWORD}"},
	    {"click": "#go"},
	    {"waitURL": "/search"},
	    {"waitVisible": "#q"}
	  ],
	  "back": [{"navigate": %q}, {"waitVisible": "#q"}],
	  "maxIdleToRefresh": "600ms", "refreshValidationInterval": "200ms",
	  "touchSession": [{"reload": true}, {"waitVisible": "#q"}]
	}`, srv.URL+"/login", srv.URL+"/search")
	if err := jsonDecode(raw, &c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate("pool"); err != nil {
		t.Fatal(err)
	}
	r := &seqrun.Runner{}
	loggedIn := func(t *testing.T, b browser.Browser) {
		t.Helper()
		var who string
		if err := b.Evaluate(ctx, `document.getElementById('who') ? document.getElementById('who').textContent : location.href`, &who); err != nil || who != "demo" {
			t.Fatalf("not on the logged-in search page: %q, %v (page %+v)", who, err, b.Page())
		}
	}
	settle := func(t *testing.T) {
		t.Helper()
		if err := m.settle(ctx); err != nil {
			t.Fatal(err)
		}
	}

	var first browser.Browser
	t.Run("lease lands logged in, back returns to search", func(t *testing.T) {
		start := time.Now()
		l, err := m.Lease(ctx, "search", &c)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("cold lease (browser + init sequence): %v", time.Since(start))
		first = l.Browser()
		loggedIn(t, first)
		if n := st.Logins(); n != 1 {
			t.Errorf("logins %d", n)
		}
		// The app's own work: a search.
		if err := r.Run(ctx, first, sequence.Sequence{sequence.Type("#q", "gophers"), sequence.Press("Enter"),
			sequence.WaitURL("/results"), sequence.WaitVisible("#res")}); err != nil {
			t.Fatal(err)
		}
		l.Return()
		settle(t)
		start = time.Now()
		l, err = m.Lease(ctx, "search", &c)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("warm lease: %v", time.Since(start))
		if l.Browser() != first {
			t.Error("a new browser instead of the returned one")
		}
		loggedIn(t, l.Browser())
		l.Return()
		settle(t)
		if n := st.Logins(); n != 1 {
			t.Errorf("logins %d: init ran again", n)
		}
	})

	t.Run("touch keeps the session past its idle timeout", func(t *testing.T) {
		// A pool without touch, as the control: its session expires.
		nc := c
		nc.MaxIdleToRefresh, nc.RefreshValidationInterval, nc.TouchSession = 0, 0, nil
		l, err := m.Lease(ctx, "notouch", &nc)
		if err != nil {
			t.Fatal(err)
		}
		l.Return()
		settle(t)
		logins := st.Logins()
		time.Sleep(st.idle + time.Second) // deliberately past the site's idle timeout
		l, err = m.Lease(ctx, "search", &c)
		if err != nil {
			t.Fatal(err)
		}
		if l.Browser() != first {
			t.Error("another browser")
		}
		// A new request with the pooled session is still served.
		if err := r.Run(ctx, l.Browser(), sequence.Sequence{sequence.Navigate(srv.URL + "/search"), sequence.WaitVisible("#q")}); err != nil {
			t.Fatalf("session lost: %v (page %+v)", err, l.Browser().Page())
		}
		loggedIn(t, l.Browser())
		l.Return()
		nl, err := m.Lease(ctx, "notouch", &nc)
		if err != nil {
			t.Fatal(err)
		}
		if err := nl.Browser().Navigate(ctx, srv.URL+"/search"); err != nil {
			t.Fatal(err)
		}
		if err := r.Run(ctx, nl.Browser(), sequence.Sequence{sequence.WaitURL("/login")}); err != nil {
			t.Errorf("control session did not expire: %v", err)
		}
		if n := st.Logins(); n != logins {
			t.Errorf("logins %d → %d: the touched browser logged in again", logins, n)
		}
		// Its back sequence would fail now and log in again (back → init):
		// remove the control pool so the browser is just destroyed.
		m.Remove("notouch")
		nl.Return()
		settle(t)
		s := poolStats(m, "search")
		if s.Touches == 0 || s.SequenceFailures[SeqTouch] != 0 || s.Destroyed != 0 {
			t.Errorf("stats %+v", s.Counters)
		}
	})

	t.Run("TTL recycling keeps the login on a fresh context", func(t *testing.T) {
		tc := c
		tc.MaxIdleToRefresh, tc.RefreshValidationInterval, tc.TouchSession = 0, 0, nil
		tc.TTL = Duration(time.Second)
		l, err := m.Lease(ctx, "ttl", &tc)
		if err != nil {
			t.Fatal(err)
		}
		old := l.Browser()
		logins := st.Logins()
		time.Sleep(1100 * time.Millisecond) // deliberately past the 1 s TTL
		start := time.Now()
		l.Return()
		settle(t)
		t.Logf("return with TTL replacement: %v", time.Since(start))
		l, err = m.Lease(ctx, "ttl", &tc)
		if err != nil {
			t.Fatal(err)
		}
		if l.Browser() == old {
			t.Fatal("browser not replaced")
		}
		select {
		case <-old.Done():
		default:
			t.Error("old browser still open")
		}
		loggedIn(t, l.Browser())
		// The server still sees the same session: the cookie moved over.
		if err := r.Run(ctx, l.Browser(), sequence.Sequence{sequence.Navigate(srv.URL + "/search"), sequence.WaitVisible("#q")}); err != nil {
			t.Fatal(err)
		}
		if n := st.Logins(); n != logins {
			t.Errorf("logins %d → %d", logins, n)
		}
		if s := poolStats(m, "ttl"); s.Recycled != 1 {
			t.Errorf("stats %+v", s.Counters)
		}
		l.Return()
	})
}

func poolStats(m *Manager, app string) Stats {
	for _, p := range m.Stats().Pools {
		if p.App == app {
			return p
		}
	}
	return Stats{}
}

func jsonDecode(s string, v any) error {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
