package assets

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
)

var (
	script = []byte(strings.Repeat("console.log('CloudBrowser client engine');\n", 50))
	png    = []byte("\x89PNG\r\n\x1a\n" + strings.Repeat("\x00\x01", 200))
	tiny   = []byte("a{}")
)

func testSet(t *testing.T) *Set {
	t.Helper()
	s, err := New(fstest.MapFS{
		"engine.js":       {Data: script},
		"logo.png":        {Data: png},
		"tiny.css":        {Data: tiny},
		"admin/admin.css": {Data: []byte(strings.Repeat("body { margin: 0 }\n", 20))},
		"page.html":       {Data: []byte("<p>{{.Template}}</p>")},
	}, func(name string) bool { return !strings.HasSuffix(name, ".html") })
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestURLAndVersion(t *testing.T) {
	s := testSet(t)
	v := s.Version("engine.js")
	if len(v) != 16 || strings.ContainsAny(v, "+/=") {
		t.Fatalf("version %q: want 16 URL-safe characters", v)
	}
	if u, err := s.URL("engine.js"); err != nil || u != "engine.js?v="+v {
		t.Fatalf("URL: %q %v", u, err)
	}
	if s.Version("admin/admin.css") == "" {
		t.Fatal("files in directories are part of the set")
	}
	if _, err := s.URL("nope.js"); err == nil {
		t.Fatal("URL of an unknown file: no error")
	}
	// The version follows the content, not the name.
	other, _ := New(fstest.MapFS{"engine.js": {Data: append([]byte("// changed\n"), script...)}}, nil)
	if other.Version("engine.js") == v {
		t.Fatal("changed content kept its version")
	}
}

func TestServe(t *testing.T) {
	s := testSet(t)
	v := s.Version("engine.js")
	etag, gzETag := `"`+v+`"`, `"`+v+`-gz"`
	tests := []struct {
		name, method, file, target string
		hdr                        map[string]string
		status                     int
		cacheControl, etag         string
		gzip                       bool   // body is gzip of the file
		vary                       string // Vary header
		ctype                      string
		body                       []byte // identity body expected (nil: check by gzip or empty)
	}{
		{name: "versioned URL is immutable", file: "engine.js", target: "/engine.js?v=" + v,
			status: 200, cacheControl: Immutable, etag: etag, vary: "Accept-Encoding", ctype: "text/javascript; charset=utf-8", body: script},
		{name: "plain URL revalidates", file: "engine.js", target: "/engine.js",
			status: 200, cacheControl: Revalidate, etag: etag, vary: "Accept-Encoding", body: script},
		{name: "stale version revalidates", file: "engine.js", target: "/engine.js?v=AAAAAAAAAAAAAAAA",
			status: 200, cacheControl: Revalidate, etag: etag, body: script},
		{name: "If-None-Match current: 304", file: "engine.js", target: "/engine.js",
			hdr:    map[string]string{"If-None-Match": etag},
			status: 304, cacheControl: Revalidate, etag: etag, vary: "Accept-Encoding"},
		{name: "If-None-Match in a list, weak form: 304", file: "engine.js", target: "/engine.js?v=" + v,
			hdr:    map[string]string{"If-None-Match": `"old", W/` + etag},
			status: 304, cacheControl: Immutable, etag: etag},
		{name: "If-None-Match stale: 200", file: "engine.js", target: "/engine.js",
			hdr:    map[string]string{"If-None-Match": `"AAAAAAAAAAAAAAAA"`},
			status: 200, cacheControl: Revalidate, etag: etag, body: script},
		{name: "gzip when accepted", file: "engine.js", target: "/engine.js?v=" + v,
			hdr:    map[string]string{"Accept-Encoding": "br, gzip;q=0.8"},
			status: 200, cacheControl: Immutable, etag: gzETag, gzip: true, vary: "Accept-Encoding", ctype: "text/javascript; charset=utf-8"},
		{name: "gzip by *", file: "engine.js", target: "/engine.js",
			hdr:    map[string]string{"Accept-Encoding": "*"},
			status: 200, etag: gzETag, gzip: true},
		{name: "gzip refused by q=0", file: "engine.js", target: "/engine.js",
			hdr:    map[string]string{"Accept-Encoding": "gzip;q=0, *"},
			status: 200, etag: etag, vary: "Accept-Encoding", body: script},
		{name: "304 for the gzip variant", file: "engine.js", target: "/engine.js",
			hdr:    map[string]string{"Accept-Encoding": "gzip", "If-None-Match": gzETag},
			status: 304, etag: gzETag, vary: "Accept-Encoding"},
		{name: "identity ETag does not validate the gzip variant", file: "engine.js", target: "/engine.js",
			hdr:    map[string]string{"Accept-Encoding": "gzip", "If-None-Match": etag},
			status: 200, etag: gzETag, gzip: true},
		{name: "Range gets identity bytes", file: "engine.js", target: "/engine.js",
			hdr:    map[string]string{"Accept-Encoding": "gzip", "Range": "bytes=0-6"},
			status: 206, etag: etag, vary: "Accept-Encoding", body: script[:7]},
		{name: "HEAD: headers, no body", method: "HEAD", file: "engine.js", target: "/engine.js?v=" + v,
			hdr:    map[string]string{"Accept-Encoding": "gzip"},
			status: 200, cacheControl: Immutable, etag: gzETag, gzip: true, vary: "Accept-Encoding"},
		{name: "not compressible: no gzip, no Vary", file: "logo.png", target: "/logo.png",
			hdr:    map[string]string{"Accept-Encoding": "gzip"},
			status: 200, ctype: "image/png", body: png},
		{name: "too small to gain: no gzip", file: "tiny.css", target: "/tiny.css",
			hdr:    map[string]string{"Accept-Encoding": "gzip"},
			status: 200, ctype: "text/css; charset=utf-8", body: tiny},
		{name: "If-Match stale on the gzip variant: 412", file: "engine.js", target: "/engine.js",
			hdr:    map[string]string{"Accept-Encoding": "gzip", "If-Match": etag},
			status: 412},
		{name: "POST refused", method: "POST", file: "engine.js", target: "/engine.js",
			status: 405},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			method := tc.method
			if method == "" {
				method = "GET"
			}
			r := httptest.NewRequest(method, tc.target, nil)
			for k, v := range tc.hdr {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			if !s.Serve(w, r, tc.file) {
				t.Fatal("file not found")
			}
			res := w.Result()
			got, _ := io.ReadAll(res.Body)
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d (%s)", res.StatusCode, tc.status, got)
			}
			h := res.Header
			if tc.cacheControl != "" && h.Get("Cache-Control") != tc.cacheControl {
				t.Errorf("Cache-Control %q, want %q", h.Get("Cache-Control"), tc.cacheControl)
			}
			if tc.etag != "" && h.Get("ETag") != tc.etag {
				t.Errorf("ETag %q, want %q", h.Get("ETag"), tc.etag)
			}
			if tc.vary != "" && h.Get("Vary") != tc.vary {
				t.Errorf("Vary %q, want %q", h.Get("Vary"), tc.vary)
			}
			if tc.ctype != "" && h.Get("Content-Type") != tc.ctype {
				t.Errorf("Content-Type %q, want %q", h.Get("Content-Type"), tc.ctype)
			}
			if (h.Get("Content-Encoding") == "gzip") != tc.gzip {
				t.Errorf("Content-Encoding %q, want gzip %v", h.Get("Content-Encoding"), tc.gzip)
			}
			switch {
			case tc.status == 304:
				if len(got) != 0 || h.Get("Content-Type") != "" || h.Get("Content-Encoding") != "" {
					t.Errorf("304 with a body or representation headers: %q %v", got, h)
				}
			case method == "HEAD":
				if len(got) != 0 {
					t.Errorf("HEAD with a body: %q", got)
				}
			case tc.gzip:
				zr, err := gzip.NewReader(bytes.NewReader(got))
				if err != nil {
					t.Fatal(err)
				}
				plain, _ := io.ReadAll(zr)
				if !bytes.Equal(plain, script) || len(got) >= len(script) {
					t.Errorf("gzip body: %d bytes, decompresses to %d bytes", len(got), len(plain))
				}
			case tc.body != nil:
				if !bytes.Equal(got, tc.body) {
					t.Errorf("body %q, want %q", got, tc.body)
				}
			}
			if tc.status == 200 && h.Get("Content-Length") == "" {
				t.Error("no Content-Length")
			}
		})
	}
}

func TestServeUnknown(t *testing.T) {
	s := testSet(t)
	for _, name := range []string{"nope.js", "", ".", "admin", "../engine.js", "/engine.js", "page.html"} {
		w := httptest.NewRecorder()
		if s.Serve(w, httptest.NewRequest("GET", "/x", nil), name) {
			t.Errorf("%q: served", name)
		}
		if w.Code != 200 || w.Body.Len() != 0 || len(w.Header()) != 0 {
			t.Errorf("%q: wrote %d %v %q; the caller answers unknown files", name, w.Code, w.Header(), w.Body)
		}
	}
}

func TestAcceptsGzip(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   bool
	}{
		{nil, false},
		{[]string{""}, false},
		{[]string{"identity"}, false},
		{[]string{"gzip"}, true},
		{[]string{"GZIP"}, true},
		{[]string{"deflate, gzip"}, true},
		{[]string{"deflate", "gzip"}, true},
		{[]string{"x-gzip"}, true},
		{[]string{"gzip;q=0"}, false},
		{[]string{"gzip; q=0.0"}, false},
		{[]string{"gzip;q=0.001"}, true},
		{[]string{"gzip;q=bad"}, false},
		{[]string{"*"}, true},
		{[]string{"*;q=0"}, false},
		{[]string{"*, gzip;q=0"}, false},
		{[]string{"gzipx"}, false},
	} {
		if got := acceptsGzip(tc.values); got != tc.want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", tc.values, got, tc.want)
		}
	}
}

// The Set serves what http.FileServer did for a request without
// validators, so nothing that relied on it breaks.
func TestSameBytesAsFileServer(t *testing.T) {
	fsys := fstest.MapFS{"engine.js": {Data: script}}
	s, _ := New(fsys, nil)
	w1, w2 := httptest.NewRecorder(), httptest.NewRecorder()
	s.Serve(w1, httptest.NewRequest("GET", "/engine.js", nil), "engine.js")
	http.FileServerFS(fsys).ServeHTTP(w2, httptest.NewRequest("GET", "/engine.js", nil))
	if !bytes.Equal(w1.Body.Bytes(), w2.Body.Bytes()) || w1.Header().Get("Content-Type") != w2.Header().Get("Content-Type") {
		t.Fatalf("differs from http.FileServer: %q/%q, %d/%d bytes", w1.Header().Get("Content-Type"),
			w2.Header().Get("Content-Type"), w1.Body.Len(), w2.Body.Len())
	}
}

// Over a real connection: the declared lengths match what is sent (a
// Content-Length on a bodiless answer would break the connection), and
// the connection is reused across answers of every kind.
func TestOverHTTP(t *testing.T) {
	s := testSet(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.Serve(w, r, strings.TrimPrefix(r.URL.Path, "/")) {
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	gzETag := `"` + s.Version("engine.js") + `-gz"`
	// DisableCompression: the client must not add or undo gzip itself.
	c := &http.Client{Transport: &http.Transport{DisableCompression: true, MaxConnsPerHost: 1}}
	for i, tc := range []struct {
		method string
		hdr    map[string]string
		status int
		length int
	}{
		{"GET", map[string]string{"Accept-Encoding": "gzip"}, 200, -1},
		{"GET", map[string]string{"Accept-Encoding": "gzip", "If-None-Match": gzETag}, 304, 0},
		{"GET", map[string]string{"Accept-Encoding": "gzip", "If-Match": `"x"`}, 412, 0},
		{"HEAD", map[string]string{"Accept-Encoding": "gzip"}, 200, 0},
		{"GET", nil, 200, len(script)},
		{"GET", map[string]string{"Accept-Encoding": "gzip"}, 200, -1},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+"/engine.js", nil)
		for k, v := range tc.hdr {
			req.Header.Set(k, v)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != tc.status {
			t.Fatalf("%d: %d %v, want %d", i, res.StatusCode, err, tc.status)
		}
		if tc.length >= 0 && len(b) != tc.length || tc.length < 0 && (len(b) == 0 || int64(len(b)) != res.ContentLength) {
			t.Fatalf("%d: %d bytes, Content-Length %d", i, len(b), res.ContentLength)
		}
	}
}
