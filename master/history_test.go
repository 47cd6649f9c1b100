package master

import (
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/registry"
)

func TestHistoryBounded(t *testing.T) {
	h := newHistory()
	t0 := time.Unix(1_800_000_000, 0)
	for i := 0; i < historyPoints+50; i++ {
		h.sample(t0.Add(time.Duration(i)*historyStep), []registry.WorkerView{{ID: "w-a", Load: wire.Load{Total: uint64(i)}}})
	}
	s := h.snapshot()["w-a"]
	if len(s) != historyPoints || s[len(s)-1][1] != int64(historyPoints+49) {
		t.Fatalf("len %d, last %v", len(s), s[len(s)-1])
	}
	// A worker that stopped reporting is forgotten after the window.
	h.sample(t0.Add(time.Duration(2*historyPoints+60)*historyStep), nil)
	if _, ok := h.snapshot()["w-a"]; ok {
		t.Fatal("gone worker kept")
	}
}
