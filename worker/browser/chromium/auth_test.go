package chromium

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// signInSite asks for basic auth (ann / s3cret) on /secret; the page then
// says who signed in.
func signInSite(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/secret" {
			fmt.Fprint(w, "<title>home</title>")
			return
		}
		if u, p, ok := r.BasicAuth(); ok && u == "ann" && p == "s3cret" {
			fmt.Fprintf(w, "<title>welcome %s</title>", u)
			return
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="the test realm"`)
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, "<title>401</title>")
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestSignIn: a site's sign-in challenge is a dialog of kind auth with the
// realm and origin; the credentials answered reach the site; wrong ones
// ask again; cancelled, or with nobody to ask, the site's 401 page shows.
func TestSignIn(t *testing.T) {
	rt := shared(t)
	site := signInSite(t)
	for _, tc := range []struct {
		name    string
		listen  bool
		answers []browser.PromptAnswer
		title   string
	}{
		{"signed in", true, []browser.PromptAnswer{{Accept: true, Text: "ann", Password: "s3cret"}}, "welcome ann"},
		{"wrong, then right", true, []browser.PromptAnswer{{Accept: true, Text: "ann", Password: "nope"}, {Accept: true, Text: "ann", Password: "s3cret"}}, "welcome ann"},
		{"cancelled", true, []browser.PromptAnswer{{}}, "401"},
		{"nobody to ask", false, nil, "401"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBrowser(t, rt, browser.Options{URL: site + "/", Width: 400, Height: 300})
			waitLoaded(t, b)
			var log promptLog
			if tc.listen {
				defer b.OnPrompt(log.add)()
			}
			go func() { _ = b.Navigate(testCtx(t), site+"/secret") }()
			for i, a := range tc.answers {
				var p browser.Prompt
				testutil.Eventually(t, 30*time.Second, func() error {
					var ok bool
					if p, ok = b.OpenPrompt(); !ok || p.Kind != browser.PromptAuth {
						return errors.New("no sign-in open")
					}
					return nil
				})
				if p.Message != "the test realm" || p.URL != site {
					t.Fatalf("sign-in %d: %+v, want realm and origin %s", i, p, site)
				}
				if err := b.AnswerPrompt(testCtx(t), p.ID, a); err != nil {
					t.Fatal(err)
				}
			}
			waitTitle(t, b, tc.title)
			if _, open := b.OpenPrompt(); open {
				t.Fatal("a sign-in stays open")
			}
		})
	}
}
