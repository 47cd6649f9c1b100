package registry

import (
	"path/filepath"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

func TestEpochsDurable(t *testing.T) {
	path := filepath.Join(t.TempDir(), state.FileName)
	st, err := state.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	e, err := newEpochs(st)
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	for range 3 {
		if last, err = e.next(); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	st, err = state.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e, err = newEpochs(st)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := e.next(); n != last+1 {
		t.Fatalf("after a restart: %d, want %d", n, last+1)
	}
}
