package registry

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

// BenchmarkInstanceJournal: what a placement waits for the instance table
// to be stored (durable.go): a record added, then journal.sync. "memory"
// is the baseline (the in-memory store of a master without a data
// directory); "bbolt" writes state.db with fsync; parallel placements share
// transactions.
func BenchmarkInstanceJournal(b *testing.B) {
	for _, store := range []string{"memory", "bbolt"} {
		for _, par := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/parallel=%d", store, par), func(b *testing.B) {
				path := ""
				if store == "bbolt" {
					path = filepath.Join(b.TempDir(), state.FileName)
				}
				st, err := state.Open(path)
				if err != nil {
					b.Fatal(err)
				}
				defer st.Close()
				m, err := New(Config{Logger: zerolog.Nop(), Store: st,
					Apps: AppsFunc(func(string) (wire.App, bool) { return wire.App{}, false })})
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close()
				var n atomic.Int64
				b.SetParallelism(par)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						i := n.Add(1)
						m.mu.Lock()
						m.addInstanceLocked(wire.InstanceInfo{ID: fmt.Sprintf("w-a.%012d", i), App: "multi", Owner: "u",
							Worker: "w-a", Created: time.Now(), Epoch: uint64(i)}, "", "", true)
						m.mu.Unlock()
						if err := m.journal.sync(context.Background()); err != nil {
							b.Fatal(err)
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "placements/s")
			})
		}
	}
}
