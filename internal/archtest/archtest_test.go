package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The limits. A package or a type over one is split by what its parts do
// (as worker.AppManager was), not by moving lines around.
const (
	maxPackageLines = 4000 // lines in a package directory's non-test .go files
	maxMethods      = 35   // methods of one type, pointer receivers included
)

// sizeRules bound a count per name over the module's non-test sources.
var sizeRules = []struct {
	name  string
	limit int
	unit  string
	count func(*module) map[string]int // name -> count
}{
	{"package lines", maxPackageLines, "lines in non-test .go files", func(m *module) map[string]int { return m.lines }},
	{"methods per type", maxMethods, "methods", func(m *module) map[string]int { return m.methods }},
}

// TestSizes fails for every package directory with more than
// maxPackageLines lines and every type with more than maxMethods methods,
// naming it with its count.
func TestSizes(t *testing.T) {
	m := load(t, moduleRoot(t))
	if len(m.lines) < 10 {
		t.Fatalf("found %d packages under %s; expected many", len(m.lines), m.root)
	}
	for _, r := range sizeRules {
		t.Run(r.name, func(t *testing.T) {
			counts := r.count(m)
			for _, name := range slices.Sorted(maps.Keys(counts)) {
				if n := counts[name]; n > r.limit {
					t.Errorf("%s: %d %s, more than %d", name, n, r.unit, r.limit)
				}
			}
		})
	}
}

// importRules: no package under from (the directory and below) may depend
// on a package under banned, directly or not, in its code or its tests.
var importRules = []struct {
	from, banned string
	why          string
}{
	{"master", "proxy", "proxies are processes the master reaches over RMI (contract.Proxy); cmd/cloudbrowser embeds one"},
}

// TestImports checks importRules against the go command's import graph.
// It blames the import that brings a banned package in: a package of the
// rule's own tree importing it, or importing something outside that tree
// which depends on it.
func TestImports(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	root := moduleRoot(t)
	for _, r := range importRules {
		t.Run(r.from+" without "+r.banned, func(t *testing.T) {
			module, pkgs := listDeps(t, root, "./"+r.from+"/...")
			bans := func(imp string) []string { // the banned packages imp is or depends on
				var bad []string
				for _, d := range append([]string{imp}, pkgs[imp].Deps...) {
					if under(module, r.banned, d) {
						bad = append(bad, variantOf(d))
					}
				}
				slices.Sort(bad)
				return slices.Compact(bad)
			}
			found := map[string][]string{} // "p imports i" -> what it brings in
			n := 0
			for path, p := range pkgs {
				if !under(module, r.from, path) || strings.HasSuffix(variantOf(path), ".test") {
					continue // outside the rule's tree, or a generated test main
				}
				n++
				if p.Error != nil {
					t.Errorf("go list %s: %s", path, p.Error.Err)
				}
				for _, imp := range p.Imports {
					if under(module, r.from, imp) {
						continue // blamed where it imports the banned tree
					}
					if bad := bans(imp); len(bad) > 0 {
						found[variantOf(path)+" imports "+variantOf(imp)] = bad
					}
				}
			}
			for _, v := range slices.Sorted(maps.Keys(found)) {
				t.Errorf("%s, bringing in %d package(s) under %s/: %s (%s)", v, len(found[v]), r.banned, strings.Join(found[v], ", "), r.why)
			}
			if n == 0 {
				t.Fatalf("go list found no package under %s/", r.from)
			}
		})
	}
}

// listedPkg is what TestImports asks go list of each package.
type listedPkg struct {
	Imports, Deps []string
	Error         *struct{ Err string }
}

// listDeps runs go list -deps -test on pattern in root: the module's path,
// and every package the pattern's packages and their tests build with
// (test variants under their own "p [q.test]" names), by import path.
func listDeps(t *testing.T, root, pattern string) (string, map[string]listedPkg) {
	t.Helper()
	cmd := exec.Command("go", "list", "-m")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	module := strings.TrimSpace(string(out))
	cmd = exec.Command("go", "list", "-e", "-deps", "-test", "-json=ImportPath,Imports,Deps,Error", pattern)
	cmd.Dir = root
	if out, err = cmd.Output(); err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]listedPkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			listedPkg
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs[p.ImportPath] = p.listedPkg
	}
	return module, pkgs
}

// under reports whether import path imp (perhaps a test variant, "p [q.test]")
// is module/dir or below it.
func under(module, dir, imp string) bool {
	imp = variantOf(imp)
	root := module + "/" + dir
	return imp == root || strings.HasPrefix(imp, root+"/")
}

// variantOf strips a test variant's suffix: "p [q.test]" is p.
func variantOf(imp string) string {
	p, _, _ := strings.Cut(imp, " ")
	return p
}

// moduleRoot is the directory of the go.mod above the working directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = up
	}
}

// module is what the size rules count in a module's non-test sources.
type module struct {
	root string
	// lines: package directory (relative to root, slash-separated) -> lines
	// of its non-test .go files, for every platform.
	lines map[string]int
	// methods: "dir.Type" -> its distinct method names (a method defined
	// per platform, in files with exclusive build constraints, counts once).
	methods map[string]int
}

// load parses every non-test .go file under root, skipping testdata,
// vendor, hidden and underscore directories and nested modules.
func load(t *testing.T, root string) *module {
	t.Helper()
	m := &module{root: root, lines: map[string]int{}, methods: map[string]int{}}
	names := map[string]map[string]bool{} // "dir.Type" -> method names
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == root {
				return nil
			}
			name := d.Name()
			if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(rel)
		m.lines[dir] += lineCount(src)
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for typ, ms := range methodsOf(f) {
			key := dir + "." + typ
			if names[key] == nil {
				names[key] = map[string]bool{}
			}
			for _, name := range ms {
				names[key][name] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for key, ms := range names {
		m.methods[key] = len(ms)
	}
	return m
}

// lineCount is the number of lines in src, as wc -l counts them plus an
// unterminated last one.
func lineCount(src []byte) int {
	n := bytes.Count(src, []byte("\n"))
	if len(src) > 0 && src[len(src)-1] != '\n' {
		n++
	}
	return n
}

// methodsOf maps each receiver type name declared in f to its methods'
// names: func (T) m, func (*T) m, func (*T[K, V]) m all count for T.
func methodsOf(f *ast.File) map[string][]string {
	out := map[string][]string{}
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Recv == nil || len(fn.Recv.List) != 1 {
			continue
		}
		if typ := receiverType(fn.Recv.List[0].Type); typ != "" {
			out[typ] = append(out[typ], fn.Name.Name)
		}
	}
	return out
}

// receiverType is the type name of a receiver expression ("" if none).
func receiverType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.Ident:
			return x.Name
		case *ast.StarExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.IndexExpr: // T[K]
			e = x.X
		case *ast.IndexListExpr: // T[K, V]
			e = x.X
		default:
			return ""
		}
	}
}

func TestMethodsOf(t *testing.T) {
	const src = `package p

type T struct{}
type G[K comparable, V any] struct{}
type H[K any] struct{}

func (T) a()                  {}
func (t *T) b()               {}
func (*T) b2()                {}
func ((T)) c()                {}
func (g *G[K, V]) d()         {}
func (G[K, V]) e()            {}
func (h *H[K]) f()            {}
func (H[_]) g()               {}
func free()                   {}
func (T) _()                  {}
`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	got := methodsOf(f)
	for _, tc := range []struct {
		typ  string
		want []string
	}{
		{"T", []string{"a", "b", "b2", "c", "_"}},
		{"G", []string{"d", "e"}},
		{"H", []string{"f", "g"}},
		{"free", nil},
	} {
		if !slices.Equal(got[tc.typ], tc.want) {
			t.Errorf("methods of %s: %v, want %v", tc.typ, got[tc.typ], tc.want)
		}
	}
}

func TestLineCount(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want int
	}{
		{"", 0},
		{"package p\n", 1},
		{"package p", 1},
		{"package p\n\nfunc f() {}\n", 3},
		{"package p\n\nfunc f() {}", 3},
	} {
		if got := lineCount([]byte(tc.src)); got != tc.want {
			t.Errorf("lineCount(%q) = %d, want %d", tc.src, got, tc.want)
		}
	}
}

func TestUnder(t *testing.T) {
	const m = "example.com/cb"
	for _, tc := range []struct {
		dir, imp string
		want     bool
	}{
		{"proxy", "example.com/cb/proxy", true},
		{"proxy", "example.com/cb/proxy/edge", true},
		{"proxy", "example.com/cb/proxy/edge [example.com/cb/master.test]", true},
		{"proxy", "example.com/cb/proxyish", false},
		{"proxy", "example.com/cb/master", false},
		{"proxy", "github.com/other/proxy", false},
		{"master", "example.com/cb/master.test", false},
	} {
		if got := under(m, tc.dir, tc.imp); got != tc.want {
			t.Errorf("under(%q, %q) = %v, want %v", tc.dir, tc.imp, got, tc.want)
		}
	}
}

// TestLoad runs the size rules' counting on a module of its own: the
// counts the rules judge are those of a known tree.
func TestLoad(t *testing.T) {
	root := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		path := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n")
	write("a/a.go", "package a\n\ntype T struct{}\n\nfunc (T) m1() {}\n")
	write("a/a_linux.go", "//go:build linux\n\npackage a\n\nfunc (*T) m2() {}\n")
	write("a/a_other.go", "//go:build !linux\n\npackage a\n\nfunc (*T) m2() {}\n") // m2 again, elsewhere
	write("a/a_test.go", "package a\n\nfunc (T) fromTest() {}\n")
	write("a/b/b.go", "package b\n\ntype U[K any] struct{}\n\nfunc (u *U[K]) m() {}\n")
	write("a/testdata/x.go", "package x\n\nfunc (T) skipped() {}\n")
	write("nested/go.mod", "module example.com/nested\n")
	write("nested/n.go", "package n\n")
	m := load(t, root)
	wantLines := map[string]int{"a": 5 + 5 + 5, "a/b": 5}
	if !maps.Equal(m.lines, wantLines) {
		t.Errorf("lines %v, want %v", m.lines, wantLines)
	}
	wantMethods := map[string]int{"a.T": 2, "a/b.U": 1}
	if !maps.Equal(m.methods, wantMethods) {
		t.Errorf("methods %v, want %v", m.methods, wantMethods)
	}
}
