package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"strings"
	"testing"
	"testing/fstest"
)

const goodManifest = `{"name":"Demo","mountPoint":"demo","entry":"index.html","strategy":"multiInstance",
 "browserLimit":{"perUser":2},"viewport":{"width":1024,"height":768},
 "navigation":{"allow":["http://127.0.0.1:*/*"],"deny":["*://*.ads.example/*"]}}`

type entry struct {
	name, link string
	typ        byte
	data       string
	size       int64 // 0 = len(data)
}

func tarGz(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		size := int64(len(e.data))
		if e.size > 0 {
			size = e.size
		}
		if typ != tar.TypeReg {
			size = 0
		}
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Linkname: e.link, Typeflag: typ, Mode: 0o644, Size: size}); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			tw.Write([]byte(e.data))
		}
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

func TestUnpack(t *testing.T) {
	manifest := entry{name: "app.json", data: goodManifest}
	index := entry{name: "index.html", data: "<h1>hi</h1>"}
	tests := []struct {
		name    string
		archive []byte
		lim     Limits
		wantErr string // "" = accepted
	}{
		{"good", tarGz(t, manifest, index, entry{name: "js/a.js", data: "1"}), Limits{}, ""},
		{"dot slash paths", tarGz(t, entry{name: "./app.json", data: goodManifest}, entry{name: "./index.html", data: "x"}), Limits{}, ""},
		{"link inside becomes a copy", tarGz(t, manifest, index, entry{name: "alias.html", typ: tar.TypeSymlink, link: "index.html"}), Limits{}, ""},
		{"absolute path", tarGz(t, manifest, index, entry{name: "/etc/passwd", data: "x"}), Limits{}, "absolute"},
		{"dot dot", tarGz(t, manifest, index, entry{name: "a/../../x", data: "x"}), Limits{}, "leaves the bundle"},
		{"symlink out", tarGz(t, manifest, index, entry{name: "evil", typ: tar.TypeSymlink, link: "../../etc/passwd"}), Limits{}, "outside the bundle"},
		{"absolute symlink", tarGz(t, manifest, index, entry{name: "evil", typ: tar.TypeSymlink, link: "/etc/passwd"}), Limits{}, "outside the bundle"},
		{"hard link to missing", tarGz(t, manifest, index, entry{name: "h", typ: tar.TypeLink, link: "nope"}), Limits{}, "not a file of the bundle"},
		{"device", tarGz(t, manifest, index, entry{name: "dev", typ: tar.TypeChar}), Limits{}, "not a regular file"},
		{"file too big", tarGz(t, manifest, index, entry{name: "big", data: strings.Repeat("x", 2000)}), Limits{MaxFileBytes: 1000}, "over the 1000 byte limit"},
		{"total too big", tarGz(t, manifest, index, entry{name: "b1", data: strings.Repeat("x", 600)}, entry{name: "b2", data: strings.Repeat("x", 600)}), Limits{MaxTotal: 1000}, "uncompressed"},
		{"too many files", tarGz(t, manifest, index, entry{name: "c", data: "1"}), Limits{MaxFiles: 2}, "more than 2 files"},
		{"no manifest", tarGz(t, index), Limits{}, "no app.json"},
		{"not gzip", []byte("hello"), Limits{}, "not gzip"},
		{"duplicate", tarGz(t, manifest, index, index), Limits{}, "twice"},
		{"bad manifest fields", tarGz(t, entry{name: "app.json", data: `{"name":"","mountPoint":"Admin!","entry":"missing.html","strategy":"sometimes","browserLimit":{"perUser":-1},"viewport":{"width":5}}`}, index), Limits{},
			"name: is required; mountPoint:"},
		{"unknown manifest field", tarGz(t, entry{name: "app.json", data: `{"name":"x","mountPoint":"x","entry":"index.html","stratgy":"x"}`}, index), Limits{}, `unknown field "stratgy"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Unpack(bytes.NewReader(tc.archive), tc.lim)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if b.Manifest.MountPoint != "demo" || len(b.Files["index.html"]) == 0 {
					t.Fatalf("bundle: %+v", b.Manifest)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestValidateNamesEveryField(t *testing.T) {
	m := Manifest{Name: "", MountPoint: "api", Entry: "ftp://x", Strategy: "x",
		BrowserLimit: BrowserLimit{PerUser: -1, PerInstance: -2}, Viewport: Viewport{Width: 50, Height: 99999},
		Navigation: Navigation{Allow: []string{""}}}
	err := m.Validate(nil)
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("not Errors: %v", err)
	}
	want := []string{"name", "mountPoint", "strategy", "entry", "browserLimit.perUser", "browserLimit.perInstance",
		"viewport.width", "viewport.height", "navigation.allow[0]"}
	got := map[string]bool{}
	for _, e := range es {
		got[e.Field] = true
	}
	for _, f := range want {
		if !got[f] {
			t.Errorf("no error for %s in %v", f, err)
		}
	}
}

func TestPackRoundTripAndLoadAll(t *testing.T) {
	fsys := fstest.MapFS{
		"a/app.json":   {Data: []byte(goodManifest)},
		"a/index.html": {Data: []byte("<h1>a</h1>")},
		"b/app.json":   {Data: []byte(strings.Replace(goodManifest, `"name":"Demo"`, `"name":"Other"`, 1))},
		"b/index.html": {Data: []byte("x")},
		"notabundle/x": {Data: []byte("x")},
	}
	arch, err := Pack(fsys, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Unpack(bytes.NewReader(arch), Limits{})
	if err != nil || string(b.Files["index.html"]) != "<h1>a</h1>" {
		t.Fatalf("round trip: %v", err)
	}
	_, err = LoadAll(fsys, ".")
	if err == nil || !strings.Contains(err.Error(), `mountPoint "demo" is already used`) {
		t.Fatalf("mount point collision not reported: %v", err)
	}
}

func TestPatterns(t *testing.T) {
	re, err := CompilePattern("https://*.example.com/*")
	if err != nil {
		t.Fatal(err)
	}
	for url, want := range map[string]bool{
		"https://www.example.com/a": true, "https://example.com/": false, "http://www.example.com/": false,
		"https://evil.com/?x=.example.com/": false,
	} {
		if re.MatchString(url) != want {
			t.Errorf("%s: match %v, want %v", url, !want, want)
		}
	}
}

func TestPoolValidation(t *testing.T) {
	base := `{"name":"P","mountPoint":"p","entry":"https://example.test/","pool":%s}`
	for _, tc := range []struct {
		pool string
		want []string // field paths that must be named; none = valid
	}{
		{`{"enabled":true,"minSize":1,"maxSize":2,"init":[{"navigate":"https://example.test/login"}],"ttl":"30m"}`, nil},
		{`{"enabled":true,"minSize":3,"maxSize":2}`, []string{"pool.minSize"}},
		{`{"enabled":true,"minSize":-1,"maxSize":2,"ttl":"soon"}`, []string{"pool"}},
		{`{"enabled":true,"maxSize":2,"init":[{"click":""}]}`, []string{"pool.init[0].click"}},
		{`{"enabled":true,"maxSize":2,"init":[{"type":"#u","text":"${user}"}]}`, []string{"pool.init[0].text"}},
		{`{"enabled":true,"maxSize":2,"bogus":1}`, []string{"pool"}},
	} {
		m, err := ParseManifest([]byte(strings.Replace(base, "%s", tc.pool, 1)))
		if err != nil {
			t.Fatal(err)
		}
		err = m.Validate(nil)
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v", tc.pool, err)
			}
			continue
		}
		for _, f := range tc.want {
			if err == nil || !strings.Contains(err.Error(), f) {
				t.Errorf("%s: error %v does not name %s", tc.pool, err, f)
			}
		}
	}
}
