package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/sequence"
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

// links returns n link entries l0..l<n-1> to "big" (hard) or "index.html".
func links(n int, typ byte) []entry {
	target := "index.html"
	if typ == tar.TypeLink {
		target = "big"
	}
	out := make([]entry, n)
	for i := range out {
		out[i] = entry{name: fmt.Sprintf("l%d", i), typ: typ, link: target}
	}
	return out
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
		// Links are refused, named, whatever their target: a link can
		// multiply bytes past the limits (100 hard links to one
		// 1 MiB file expanded a 1.9 KB upload to 106 MB).
		{"symlink inside", tarGz(t, manifest, index, entry{name: "alias.html", typ: tar.TypeSymlink, link: "index.html"}), Limits{}, `alias.html is a symbolic link (to "index.html")`},
		{"symlink out", tarGz(t, manifest, index, entry{name: "evil", typ: tar.TypeSymlink, link: "../../etc/passwd"}), Limits{}, "evil is a symbolic link"},
		{"absolute symlink", tarGz(t, manifest, index, entry{name: "evil", typ: tar.TypeSymlink, link: "/etc/passwd"}), Limits{}, "evil is a symbolic link"},
		{"hard link", tarGz(t, manifest, index, entry{name: "h", typ: tar.TypeLink, link: "index.html"}), Limits{}, `h is a hard link (to "index.html")`},
		{"hard link to missing", tarGz(t, manifest, index, entry{name: "h", typ: tar.TypeLink, link: "nope"}), Limits{}, "h is a hard link"},
		{"many links", tarGz(t, append([]entry{manifest, index}, links(20_000, tar.TypeSymlink)...)...), Limits{}, "l0 is a symbolic link"},
		{"oversized via hard links", tarGz(t, append([]entry{manifest, index, {name: "big", data: strings.Repeat("x", 600)}}, links(100, tar.TypeLink)...)...), Limits{MaxTotal: 1000}, "l0 is a hard link"},
		{"char device", tarGz(t, manifest, index, entry{name: "dev", typ: tar.TypeChar}), Limits{}, "dev is a character device"},
		{"block device", tarGz(t, manifest, index, entry{name: "sda", typ: tar.TypeBlock}), Limits{}, "sda is a block device"},
		{"fifo", tarGz(t, manifest, index, entry{name: "pipe", typ: tar.TypeFifo}), Limits{}, "pipe is a named pipe"},
		{"too many files", tarGz(t, manifest, index, entry{name: "c", data: "1"}), Limits{MaxFiles: 2}, "more than 2 entries"},
		{"directories count toward the entries", tarGz(t, manifest, index, entry{name: "d/", typ: tar.TypeDir}), Limits{MaxFiles: 2}, "more than 2 entries"},
		{"absolute path", tarGz(t, manifest, index, entry{name: "/etc/passwd", data: "x"}), Limits{}, "absolute"},
		{"dot dot", tarGz(t, manifest, index, entry{name: "a/../../x", data: "x"}), Limits{}, "leaves the bundle"},
		{"file too big", tarGz(t, manifest, index, entry{name: "big", data: strings.Repeat("x", 2000)}), Limits{MaxFileBytes: 1000}, "over the 1000 byte limit"},
		{"total too big", tarGz(t, manifest, index, entry{name: "b1", data: strings.Repeat("x", 600)}, entry{name: "b2", data: strings.Repeat("x", 600)}), Limits{MaxTotal: 1000}, "uncompressed"},
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
		Navigation: Navigation{Allow: []string{""}}, IdleTimeout: new(sequence.Duration(time.Millisecond)), Files: Files{MaxMB: -1}}
	err := m.Validate(nil)
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("not Errors: %v", err)
	}
	want := []string{"name", "mountPoint", "strategy", "entry", "browserLimit.perUser", "browserLimit.perInstance",
		"viewport.width", "viewport.height", "navigation.allow[0]", "idleTimeout", "files.maxMB"}
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

// TestLoadFollowsSymlinks: the CLI packs a link's target when it is a file
// of the bundle directory and refuses, naming the link, one that leaves it.
func TestLoadFollowsSymlinks(t *testing.T) {
	tests := []struct {
		name    string
		link    string // target of <bundle>/js/alias.js
		wantErr string // "" = packed as a copy of js/lib.js
	}{
		{"relative inside", "lib.js", ""},
		{"through the root", "../js/lib.js", ""},
		{"chain", "chain.js", ""},
		{"outside", "../../secret.txt", `js/alias.js: symbolic link to "../../secret.txt", outside the bundle directory`},
		{"absolute", "/etc/passwd", `js/alias.js: symbolic link to "/etc/passwd", outside the bundle directory`},
		{"directory", "..", "only links to files are followed"},
		{"dangling", "nope.js", `js/alias.js: symbolic link to "nope.js"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "bundle")
			must(t, os.MkdirAll(filepath.Join(dir, "js"), 0o755))
			must(t, os.WriteFile(filepath.Join(root, "secret.txt"), []byte("secret"), 0o600))
			must(t, os.WriteFile(filepath.Join(dir, "app.json"), []byte(goodManifest), 0o644))
			must(t, os.WriteFile(filepath.Join(dir, "index.html"), []byte("hi"), 0o644))
			must(t, os.WriteFile(filepath.Join(dir, "js", "lib.js"), []byte("lib"), 0o644))
			must(t, os.Symlink("lib.js", filepath.Join(dir, "js", "chain.js")))
			must(t, os.Symlink(tc.link, filepath.Join(dir, "js", "alias.js")))
			for _, load := range []func() (*Bundle, error){
				func() (*Bundle, error) { return Load(os.DirFS(dir), ".") },
				func() (*Bundle, error) { return Load(os.DirFS(root), "bundle") },
			} {
				b, err := load()
				if tc.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
						t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if got := string(b.Files["js/alias.js"]); got != "lib" {
					t.Fatalf("js/alias.js = %q, want the target's bytes", got)
				}
				arch, err := b.Pack()
				must(t, err)
				if _, err := Unpack(bytes.NewReader(arch), Limits{}); err != nil {
					t.Fatalf("the packed bundle is refused: %v", err)
				}
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// idleTimeout has a default, 0 turns release off, and a
// malformed value names the field.
func TestIdleTimeout(t *testing.T) {
	for _, tc := range []struct {
		json string
		want time.Duration
		err  string
	}{
		{``, DefaultIdleTimeout, ""},
		{`,"idleTimeout":"30s"`, 30 * time.Second, ""},
		{`,"idleTimeout":"0"`, 0, ""},
		{`,"idleTimeout":"10ms"`, 0, "idleTimeout"},
		{`,"idleTimeout":"-1m"`, 0, "idleTimeout"},
		{`,"idleTimeout":"soon"`, 0, "idleTimeout"},
	} {
		m, err := ParseManifest([]byte(`{"name":"A","mountPoint":"a","entry":"https://x.example/"` + tc.json + `}`))
		if err == nil {
			err = m.Validate(nil)
		}
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want one naming %s", tc.json, err, tc.err)
			}
			continue
		}
		if err != nil || m.Idle() != tc.want {
			t.Errorf("%s: %v %v, want %v", tc.json, m.Idle(), err, tc.want)
		}
	}
}

// TestReservedMountPoints: the cluster's own first path segments (the
// automation endpoints json and cdp among them) cannot be an app's mount
// point, so /cdp?app=… always reaches the proxies' one-step CDP URL.
func TestReservedMountPoints(t *testing.T) {
	for _, tc := range []struct {
		mount    string
		reserved bool
	}{
		{"cdp", true}, {"json", true}, {"api", true}, {"login", true},
		{"cdpx", false}, {"my-cdp", false}, {"shop", false},
	} {
		t.Run(tc.mount, func(t *testing.T) {
			if got := Reserved(tc.mount); got != tc.reserved {
				t.Errorf("Reserved(%q) = %v", tc.mount, got)
			}
			m, err := ParseManifest([]byte(`{"name":"A","mountPoint":"` + tc.mount + `","entry":"https://x.example/"}`))
			if err != nil {
				t.Fatal(err)
			}
			err = m.Validate(nil)
			if refused := err != nil && strings.Contains(err.Error(), "reserved by the cluster"); refused != tc.reserved {
				t.Errorf("Validate of mountPoint %q: %v", tc.mount, err)
			}
		})
	}
}
