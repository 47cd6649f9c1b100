package internal_test

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// processDirs are the process packages: internal/ sits below them, so
// nothing in it may import them (the packages point one way).
var processDirs = []string{"proxy", "worker", "master"}

// TestNoUpwardImports fails when a package under internal/ imports proxy/,
// worker/ or master/ (in its code or its tests). internal/e2e is exempt
// from the test imports: it drives the whole product by design.
func TestNoUpwardImports(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Module,Imports,TestImports,XTestImports", "./...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	n := 0
	for {
		var p struct {
			ImportPath                         string
			Module                             struct{ Path string }
			Imports, TestImports, XTestImports []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		n++
		imports := p.Imports
		if !strings.HasSuffix(p.ImportPath, "/internal/e2e") {
			imports = slices.Concat(imports, p.TestImports, p.XTestImports)
		}
		for _, imp := range imports {
			if upward(p.Module.Path, imp) {
				t.Errorf("%s imports %s: internal/ must not depend on %s", p.ImportPath, imp, strings.Join(processDirs, "/, ")+"/")
			}
		}
	}
	if n < 10 {
		t.Fatalf("go list found %d packages under internal/; expected many", n)
	}
}

// upward reports whether imp is module/<process dir> or below it.
func upward(module, imp string) bool {
	for _, d := range processDirs {
		root := module + "/" + d
		if imp == root || strings.HasPrefix(imp, root+"/") {
			return true
		}
	}
	return false
}

func TestUpward(t *testing.T) {
	const m = "example.com/cb"
	tests := []struct {
		imp  string
		want bool
	}{
		{"example.com/cb/proxy", true},
		{"example.com/cb/worker/pool", true},
		{"example.com/cb/master/balance", true},
		{"example.com/cb/internal/wire", false},
		{"example.com/cb/workers", false},
		{"example.com/cb/rmi", false},
		{"github.com/other/proxy", false},
	}
	for _, tt := range tests {
		if got := upward(m, tt.imp); got != tt.want {
			t.Errorf("upward(%q) = %v, want %v", tt.imp, got, tt.want)
		}
	}
}
