package seqrun

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/sequence"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium"
)

// testSite is a login form whose submit button records whether the click
// was a trusted (real input) event, a search page behind the session
// cookie, results, a cookie echo and a reload counter.
func testSite() (http.Handler, *atomic.Int64) {
	var searchHits atomic.Int64
	mux := http.NewServeMux()
	page := func(w http.ResponseWriter, title, body string) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!doctype html><title>%s</title><body>%s</body>", title, body)
	}
	mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) {
		page(w, "Login", `<form method=post action=/login>
<input id=user name=user><input id=pass name=pass type=password value=prefilled>
<input type=hidden id=trusted name=trusted value=no>
<div style="height:1500px">spacer so the button needs scrolling</div>
<button id=go type=submit>Log in</button></form>
<script>document.getElementById('go').addEventListener('click', e => { document.getElementById('trusted').value = e.isTrusted ? 'yes' : 'no'; });</script>`)
	})
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("user") != "demo" || r.FormValue("pass") != `s3cr"t` || r.FormValue("trusted") != "yes" {
			page(w, "Denied", fmt.Sprintf("denied user=%q trusted=%q", r.FormValue("user"), r.FormValue("trusted")))
			return
		}
		http.SetCookie(w, &http.Cookie{Name: "sid", Value: "s1", Path: "/", HttpOnly: true})
		http.Redirect(w, r, "/search", http.StatusSeeOther)
	})
	mux.HandleFunc("GET /search", func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie("sid"); err != nil || c.Value != "s1" {
			http.Redirect(w, r, "/login", http.StatusSeeOther)
			return
		}
		n := searchHits.Add(1)
		page(w, "Search", fmt.Sprintf(`<p id=hits>%d</p><form action=/results><input id=q name=q></form>
<p id=late style="display:none">ready</p>
<script>setTimeout(() => document.getElementById('late').style.display = 'block', 300)</script>`, n))
	})
	mux.HandleFunc("GET /results", func(w http.ResponseWriter, r *http.Request) {
		page(w, "Results", "results for "+r.FormValue("q"))
	})
	mux.HandleFunc("GET /echo", func(w http.ResponseWriter, r *http.Request) {
		var parts []string
		for _, c := range r.Cookies() {
			parts = append(parts, c.Name+"="+c.Value)
		}
		page(w, "Echo", "<pre id=c>"+strings.Join(parts, ";")+"</pre>")
	})
	return mux, &searchHits
}

func TestChromium(t *testing.T) {
	testutil.NeedChromium(t)
	if testing.Short() {
		t.Skip("short")
	}
	h, hits := testSite()
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := chromium.New(ctx, chromium.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	b, err := rt.NewBrowser(ctx, chromiumOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())

	r := &Runner{Secrets: sequence.MapSecrets(map[string]string{"PW": `s3cr"t`})}
	q := sequence.Sequence{
		sequence.Navigate(srv.URL + "/login"),
		sequence.Type("#user", "demo"),
		sequence.Type("#pass", "${secret:PW}"), // replaces the prefilled value
		sequence.Click("#go"),                  // below the fold: scrolled into view first
		sequence.WaitURL("/search"),
		sequence.WaitVisible("#late"),
		sequence.Eval(`document.getElementById('hits').textContent === '1' || Promise.reject(new Error('hits ' + document.getElementById('hits').textContent))`),
		sequence.Reload(),
		sequence.Eval(`document.getElementById('hits').textContent === '2' || Promise.reject(new Error('reload did not reload'))`),
		sequence.Type("#q", "golang"),
		sequence.Press("Enter"),
		sequence.WaitURLMatch(`/results\?q=golang$`),
		sequence.WaitVisible("body"), // the URL commits before the document is parsed
		sequence.Eval(`document.body.textContent.includes('results for golang') || Promise.reject(new Error(document.body.textContent))`),
		sequence.SetCookie(sequence.Cookie{Name: "lang", Value: "en"}),
		sequence.Navigate(srv.URL + "/echo"),
		sequence.Eval(`/lang=en/.test(document.getElementById('c').textContent) && /sid=s1/.test(document.getElementById('c').textContent) || Promise.reject(new Error(document.getElementById('c').textContent))`),
		sequence.Sleep(10 * time.Millisecond),
	}
	if err := q.Validate("q", sequence.Rules{NoVars: true}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := r.Run(ctx, b, q); err != nil {
		t.Fatalf("%v (page %+v)", err, b.Page())
	}
	t.Logf("%d steps in %v", len(q), time.Since(start))
	if n := hits.Load(); n != 2 {
		t.Errorf("search hits %d, want 2", n)
	}

	// A failing step names its index and kind; the secret stays hidden.
	err = r.Run(ctx, b, sequence.Sequence{sequence.Navigate(srv.URL + "/login"), sequence.WaitVisible("#nope").WithTimeout(300 * time.Millisecond)})
	var se *StepError
	if !errors.As(err, &se) || se.Index != 1 || se.Kind != sequence.KindWaitVisible || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
	if !strings.Contains(err.Error(), "no element matches #nope") {
		t.Errorf("err %v", err)
	}
}

func chromiumOptions() browser.Options { return browser.Options{Width: 800, Height: 600} }
