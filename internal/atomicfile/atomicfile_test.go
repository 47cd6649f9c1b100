package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// countSyncs counts SyncDir calls per directory for the test.
func countSyncs(t *testing.T) func(dir string) int {
	var mu sync.Mutex
	n := map[string]int{}
	old := syncDir
	syncDir = func(dir string) error {
		mu.Lock()
		n[dir]++
		mu.Unlock()
		return SyncDir(dir) // the real one must work on a directory
	}
	t.Cleanup(func() { syncDir = old })
	return func(dir string) int { mu.Lock(); defer mu.Unlock(); return n[dir] }
}

// onlyFiles fails if dir holds anything but want (no temporary leftovers).
func onlyFiles(t *testing.T, dir string, want ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if len(got) != len(want) {
		t.Fatalf("dir holds %q, want %q", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("dir holds %q, want %q", got, want)
		}
	}
}

func TestWriteFile(t *testing.T) {
	syncs := countSyncs(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	for _, tc := range []struct {
		data string
		perm fs.FileMode
	}{{"one", 0o600}, {"two, longer", 0o640}, {"", 0o600}} {
		if err := WriteFile(p, []byte(tc.data), tc.perm); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil || string(b) != tc.data {
			t.Fatalf("read %q, %v; want %q", b, err, tc.data)
		}
		st, _ := os.Stat(p)
		if st.Mode().Perm() != tc.perm {
			t.Errorf("mode %v, want %v", st.Mode().Perm(), tc.perm)
		}
		onlyFiles(t, dir, "f")
	}
	if n := syncs(dir); n != 3 {
		t.Errorf("dir synced %d times for 3 writes", n)
	}
}

func TestWriteFileErrorLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "sub") // a directory: the rename fails
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(target, []byte("data"), 0o600); err == nil {
		t.Fatal("replacing a non-empty directory succeeded")
	}
	onlyFiles(t, dir, "sub")
}

func TestCreateExclusive(t *testing.T) {
	syncs := countSyncs(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "secret")
	if err := CreateExclusive(p, []byte("first"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := CreateExclusive(p, []byte("second"), 0o600)
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second create: %v, want fs.ErrExist", err)
	}
	b, _ := os.ReadFile(p)
	if string(b) != "first" {
		t.Fatalf("file holds %q after a losing create, want first", b)
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", st.Mode().Perm())
	}
	onlyFiles(t, dir, "secret")
	if syncs(dir) != 1 {
		t.Errorf("dir synced %d times, want 1 (the create)", syncs(dir))
	}
}

// Racing creators: exactly one wins and every one reads the winner's data.
func TestCreateExclusiveRace(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "secret")
	var wg sync.WaitGroup
	wins := make(chan string, 8)
	for i := range 8 {
		wg.Go(func() {
			data := string(rune('a' + i))
			if err := CreateExclusive(p, []byte(data), 0o600); err == nil {
				wins <- data
			} else if !errors.Is(err, fs.ErrExist) {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	close(wins)
	var won []string
	for w := range wins {
		won = append(won, w)
	}
	b, _ := os.ReadFile(p)
	if len(won) != 1 || string(b) != won[0] {
		t.Fatalf("winners %q, file %q", won, b)
	}
	onlyFiles(t, dir, "secret")
}

func TestMkdirAll(t *testing.T) {
	syncs := countSyncs(t)
	base := t.TempDir()
	d := filepath.Join(base, "a", "b")
	if err := MkdirAll(d, 0o700); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
		t.Fatalf("stat: %v", err)
	}
	if syncs(base) != 1 || syncs(filepath.Join(base, "a")) != 1 {
		t.Errorf("parents not synced: base %d, a %d", syncs(base), syncs(filepath.Join(base, "a")))
	}
	if err := MkdirAll(d, 0o700); err != nil { // exists: fine
		t.Fatal(err)
	}
}
