package state

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type rec struct {
	N int    `json:"n"`
	S string `json:"s"`
}

func TestStore(t *testing.T) {
	for _, tc := range []struct {
		name string
		path func(t *testing.T) string
	}{
		{"memory", func(*testing.T) string { return "" }},
		{"bolt", func(t *testing.T) string { return filepath.Join(t.TempDir(), FileName) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(tc.path(t))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.Put("b", "k", rec{1, "x"}); err != nil {
				t.Fatal(err)
			}
			var r rec
			if ok, err := s.Get("b", "k", &r); !ok || err != nil || r != (rec{1, "x"}) {
				t.Fatalf("get = %v %v %+v", ok, err, r)
			}
			if ok, _ := s.Get("b", "missing", &r); ok {
				t.Fatal("missing key found")
			}
			if !s.Has("b", "k") || s.Has("b", "missing") || s.Has("nobucket", "k") {
				t.Fatal("Has disagrees with Get")
			}
			// A failing transaction changes nothing.
			boom := errors.New("boom")
			err = s.Update(func(tx Tx) error {
				if err := tx.Put("b", "k2", rec{2, "y"}); err != nil {
					return err
				}
				return boom
			})
			if !errors.Is(err, boom) {
				t.Fatalf("update err = %v", err)
			}
			if ok, _ := s.Get("b", "k2", &r); ok {
				t.Fatal("rolled-back write is visible")
			}
			got := map[string]rec{}
			if err := Each(s, "b", func(k string, v rec) { got[k] = v }); err != nil || len(got) != 1 {
				t.Fatalf("each = %v %v", got, err)
			}
			if err := s.Delete("b", "k"); err != nil {
				t.Fatal(err)
			}
			if len(s.All("b")) != 0 {
				t.Fatal("delete left the key")
			}
		})
	}
}

func TestStoreDurableAndLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put("b", "k", rec{N: 7}); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open = %v, want ErrLocked", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %v %v", fi.Mode(), err)
	}
	s.Close()
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var r rec
	if ok, _ := s.Get("b", "k", &r); !ok || r.N != 7 {
		t.Fatalf("after reopen: %v %+v", ok, r)
	}
}

func TestStoreCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	if err := os.WriteFile(path, []byte("not a database, not at all, definitely garbage bytes here"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path); err == nil {
		t.Fatal("corrupt file opened")
	}
}

func TestStoreScanAndDropBucket(t *testing.T) {
	for _, tc := range []struct {
		name string
		path func(t *testing.T) string
	}{
		{"memory", func(t *testing.T) string { return "" }},
		{"bolt", func(t *testing.T) string { return filepath.Join(t.TempDir(), FileName) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(tc.path(t))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for _, k := range []string{"c", "a", "b", "d"} {
				if err := s.Put("bk", k, k); err != nil {
					t.Fatal(err)
				}
			}
			scan := func(after string, limit int) string {
				var got []string
				s.Scan("bk", after, func(k string, raw []byte) bool {
					got = append(got, k+"="+string(raw))
					return len(got) < limit
				})
				return strings.Join(got, ",")
			}
			for _, c := range []struct {
				after string
				limit int
				want  string
			}{
				{"", 10, `a="a",b="b",c="c",d="d"`},
				{"b", 10, `c="c",d="d"`},
				{"bb", 10, `c="c",d="d"`},
				{"", 2, `a="a",b="b"`},
				{"d", 10, ``},
			} {
				if got := scan(c.after, c.limit); got != c.want {
					t.Errorf("scan after %q limit %d: %s, want %s", c.after, c.limit, got, c.want)
				}
			}
			if err := s.DropBucket("bk"); err != nil {
				t.Fatal(err)
			}
			if err := s.DropBucket("never there"); err != nil {
				t.Fatal(err)
			}
			if got := scan("", 10); got != "" {
				t.Fatalf("after drop: %s", got)
			}
		})
	}
}

func TestStoreRaw(t *testing.T) {
	for _, path := range []string{"", filepath.Join(t.TempDir(), FileName)} {
		s, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := s.GetRaw("r", "k"); ok {
			t.Fatal("missing raw key found")
		}
		if err := s.PutRaw("r", "k", []byte{0, 1, 2}); err != nil {
			t.Fatal(err)
		}
		got, ok := s.GetRaw("r", "k")
		if !ok || string(got) != "\x00\x01\x02" {
			t.Fatalf("raw = %v %v", got, ok)
		}
		got[0] = 9 // a copy: the store is unchanged
		if again, _ := s.GetRaw("r", "k"); again[0] != 0 {
			t.Fatal("GetRaw returned the store's own bytes")
		}
		s.Close()
	}
}

// TestStoreRawReads: a write transaction reads its own writes and a View
// sees records written together, together.
func TestStoreRawReads(t *testing.T) {
	for _, path := range []string{"", filepath.Join(t.TempDir(), FileName)} {
		s, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		err = s.Update(func(tx Tx) error {
			if tx.GetRaw("b", "k") != nil {
				t.Errorf("%q: absent key read as present", path)
			}
			if err := tx.PutRaw("b", "k", []byte("v1")); err != nil {
				return err
			}
			if got := string(tx.GetRaw("b", "k")); got != "v1" {
				t.Errorf("%q: own write read as %q", path, got)
			}
			if err := tx.PutRaw("b", "k2", []byte("w1")); err != nil {
				return err
			}
			if err := tx.Delete("b", "k2"); err != nil {
				return err
			}
			if tx.GetRaw("b", "k2") != nil {
				t.Errorf("%q: own delete read as present", path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var got string
		if err := s.View(func(tx ReadTx) error { got = string(tx.GetRaw("b", "k")); return nil }); err != nil || got != "v1" {
			t.Fatalf("%q: view = %q %v", path, got, err)
		}
		s.Close()
	}
}
