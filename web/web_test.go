package web

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/internal/httpsec"
)

// The engine page names each asset by its current version, and every asset
// it names exists: a browser keeps them until the binary changes them.
func TestEnginePageNamesVersionedAssets(t *testing.T) {
	var buf bytes.Buffer
	base := "/hello/a/w-test.abcdefghijkl"
	if err := Engine.Execute(&buf, EngineData{App: "hello", Base: base, Socket: base + "/b/bxyz/ws"}); err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(buf.String(), -1)
	seen := map[string]bool{}
	for _, m := range refs {
		rest, ok := strings.CutPrefix(m[1], base+"/_cb/")
		if !ok {
			t.Errorf("reference %q outside %s/_cb/", m[1], base)
			continue
		}
		name, v, _ := strings.Cut(rest, "?v=")
		if want := Assets.Version(name); want == "" || v != want {
			t.Errorf("reference %q: version %q, want %q", m[1], v, want)
		}
		seen[name] = true
	}
	if !seen["engine.js"] || !seen["engine.css"] {
		t.Fatalf("engine page does not load engine.js and engine.css: %s", buf.String())
	}
}

// Templates are rendered, never handed out as files.
func TestAssetsLeaveOutTemplates(t *testing.T) {
	_ = fs.WalkDir(Static, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if served := Assets.Version(name) != ""; served == strings.HasSuffix(name, ".html") {
			t.Errorf("%s: served %v", name, served)
		}
		return nil
	})
}

// Every inline script and style of our pages is allowed by its hash in the
// pages' Content-Security-Policy, as the template source has it.
func TestInlineBlocksInPolicy(t *testing.T) {
	csp := httpsec.PageCSP()
	blocks := regexp.MustCompile(`(?s)<(?:script|style)>(.*?)</(?:script|style)>`)
	_ = fs.WalkDir(files, "static", func(name string, d fs.DirEntry, err error) error {
		if err != nil || !strings.HasSuffix(name, ".html") {
			return err
		}
		b, _ := files.ReadFile(name)
		for _, m := range blocks.FindAllSubmatch(b, -1) {
			sum := sha256.Sum256(m[1])
			if h := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(csp, h) {
				t.Errorf("%s: inline block %.40q not in the policy (%s)", name, m[1], h)
			}
		}
		return nil
	})
}
