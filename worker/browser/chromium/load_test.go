package chromium

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	_ "image/jpeg"
	"image/png"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/egress"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// loadSite is the site of the Load and Capture tests.
func loadSite() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "<!doctype html><title>fine</title><p>hello")
	})
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, "<!doctype html><title>gone</title><p>not here")
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ok?from=redirect", http.StatusFound)
	})
	// /late adds #late after 300 ms, and fetches /slow (400 ms) after load.
	mux.HandleFunc("/late", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!doctype html><title>late</title><script>
setTimeout(() => { const d = document.createElement("div"); d.id = "late"; document.body.appendChild(d); }, 300);
addEventListener("load", () => fetch("/slow").then(r => r.text()).then(t => { document.title = t; }));
</script>`)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(400 * time.Millisecond)
		fmt.Fprint(w, "fetched")
	})
	mux.HandleFunc("/tall", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!doctype html><title>tall</title><style>body{margin:0}</style><div style="height:3000px;background:#08f">tall</div>`)
	})
	return mux
}

func TestLoad(t *testing.T) {
	rt := shared(t)
	site := httptest.NewServer(loadSite())
	defer site.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close() // a port nobody listens on

	tests := []struct {
		name       string
		path       string
		url        string
		opts       browser.LoadOptions
		status     int
		final      string
		title      string
		unreach    string // reason, when the site cannot be reached
		invalidSel bool
	}{
		{name: "ok", path: "/ok", status: 200, final: "/ok", title: "fine"},
		{name: "not found", path: "/missing", status: 404, final: "/missing", title: "gone"},
		{name: "redirect", path: "/redirect", status: 200, final: "/ok?from=redirect", title: "fine"},
		{name: "selector", path: "/late", opts: browser.LoadOptions{WaitSelector: "#late"}, status: 200, final: "/late", title: "late"},
		{name: "network idle", path: "/late", opts: browser.LoadOptions{WaitNetworkIdle: true}, status: 200, final: "/late", title: "fetched"},
		{name: "invalid selector", path: "/ok", opts: browser.LoadOptions{WaitSelector: "##"}, invalidSel: true},
		{name: "refused", url: closedURL + "/", unreach: "connection refused"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			b := newBrowser(t, rt, browser.Options{})
			url := tc.url
			if url == "" {
				url = site.URL + tc.path
			}
			res, err := b.Load(ctx, url, tc.opts)
			switch {
			case tc.unreach != "":
				var ue *browser.UnreachableError
				if !errors.As(err, &ue) || ue.Reason != tc.unreach {
					t.Fatalf("Load = %v, want unreachable: %s", err, tc.unreach)
				}
				return
			case tc.invalidSel:
				if !errors.Is(err, browser.ErrInvalidSelector) {
					t.Fatalf("Load = %v, want ErrInvalidSelector", err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if res.Status != tc.status || res.FinalURL != site.URL+tc.final || res.Title != tc.title {
				t.Fatalf("Load = %+v, want status %d final %s title %q", res, tc.status, site.URL+tc.final, tc.title)
			}
			if tc.opts.WaitSelector != "" {
				if !eval[bool](t, b, `document.getElementById("late") !== null`) {
					t.Fatal("selector wait returned before the element existed")
				}
			}
		})
	}
}

// TestLoadEgressRefused: a site the egress guard refuses is unreachable
// with the guard named, not an HTTP 403 from the site.
func TestLoadEgressRefused(t *testing.T) {
	rt := shared(t)
	ctx := testCtx(t)
	site := httptest.NewServer(loadSite())
	defer site.Close()
	g, err := egress.New(egress.Config{InternalSuffix: ".app.test.internal"})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	e, err := g.Open(&egress.Tenant{})
	if err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, rt, browser.Options{Egress: e})
	_, err = b.Load(ctx, site.URL+"/ok", browser.LoadOptions{})
	var ue *browser.UnreachableError
	if !errors.As(err, &ue) || ue.Reason != "blocked by egress guard" {
		t.Fatalf("Load = %v, want blocked by egress guard", err)
	}
	// Allowed, the same site loads through the guard with its status.
	_, port, _ := net.SplitHostPort(site.Listener.Addr().String())
	rules, err := egress.ParseRules("allow", []string{"127.0.0.1:" + port})
	if err != nil {
		t.Fatal(err)
	}
	e.Assign(&egress.Tenant{Allow: rules})
	res, err := b.Load(ctx, site.URL+"/missing", browser.LoadOptions{})
	if err != nil || res.Status != 404 {
		t.Fatalf("Load through the guard = %+v, %v; want 404", res, err)
	}
}

func TestLoadPolicyRefused(t *testing.T) {
	rt := shared(t)
	site := httptest.NewServer(loadSite())
	defer site.Close()
	b := newBrowser(t, rt, browser.Options{Allow: func(u string) bool { return !strings.Contains(u, "/ok") }})
	if _, err := b.Load(testCtx(t), site.URL+"/redirect", browser.LoadOptions{}); !errors.Is(err, browser.ErrBlocked) {
		t.Fatalf("Load of a redirect to a denied URL = %v, want ErrBlocked", err)
	}
}

func TestCapture(t *testing.T) {
	rt := shared(t)
	site := httptest.NewServer(loadSite())
	defer site.Close()
	ctx := testCtx(t)
	b := newBrowser(t, rt, browser.Options{Width: 640, Height: 480})
	if _, err := b.Load(ctx, site.URL+"/tall", browser.LoadOptions{}); err != nil {
		t.Fatal(err)
	}
	decode := func(data []byte) image.Config {
		t.Helper()
		cfg, _, err := image.DecodeConfig(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		return cfg
	}
	data, err := b.Capture(ctx, browser.CaptureOptions{Format: browser.CapturePNG})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(bytes.NewReader(data)); err != nil {
		t.Fatalf("viewport PNG: %v", err)
	}
	if c := decode(data); c.Width != 640 || c.Height != 480 {
		t.Fatalf("viewport PNG is %dx%d, want 640x480", c.Width, c.Height)
	}
	data, err = b.Capture(ctx, browser.CaptureOptions{Format: browser.CapturePNG, FullPage: true})
	if err != nil {
		t.Fatal(err)
	}
	if c := decode(data); c.Width != 640 || c.Height != 3000 {
		t.Fatalf("full-page PNG is %dx%d, want 640x3000", c.Width, c.Height)
	}
	data, err = b.Capture(ctx, browser.CaptureOptions{Format: browser.CaptureJPEG, Quality: 50})
	if err != nil {
		t.Fatal(err)
	}
	if c := decode(data); c.Width != 640 || c.Height != 480 {
		t.Fatalf("JPEG is %dx%d, want 640x480", c.Width, c.Height)
	}
	if !bytes.HasPrefix(data, []byte{0xff, 0xd8}) {
		t.Fatal("JPEG does not start with a JPEG marker")
	}
	data, err = b.Capture(ctx, browser.CaptureOptions{Format: browser.CapturePDF})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte("%PDF")) {
		t.Fatalf("PDF starts with %q", data[:min(len(data), 8)])
	}
	// The viewport is back to its size after a full-page capture.
	if w := eval[int](t, b, "innerHeight"); w != 480 {
		t.Fatalf("innerHeight after captures = %d, want 480", w)
	}
}
