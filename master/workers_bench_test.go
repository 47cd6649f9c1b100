package master

import (
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// BenchmarkUserInstances: the landing page's listing (owned and shared
// instances of one user) against the size of the instance table. Compare
// the sizes within one run: with the per-user index the listing costs what
// the user has, not what the table holds.
func BenchmarkUserInstances(b *testing.B) {
	for _, n := range []int{100, 10_000, 100_000} {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			m := NewWorkerManager(WorkerManagerConfig{Logger: zerolog.Nop(), Apps: func(string) (wire.App, bool) { return wire.App{}, false }})
			now := time.Now()
			for i := range n {
				in := wire.InstanceInfo{ID: fmt.Sprintf("w-a.%012d", i), App: "multi", Owner: fmt.Sprintf("user%d", i%1000),
					Worker: "w-a", Created: now.Add(time.Duration(i))}
				if i%(n/20) == 7 { // user7 owns n/1000 and is shared 20
					in.Shared = map[string]string{"user7": "reader"}
				}
				m.addInstanceLocked(in, "", "", false)
			}
			b.ResetTimer()
			for b.Loop() {
				if len(m.userInstances("multi", "user7")) == 0 {
					b.Fatal("nothing listed")
				}
			}
		})
	}
}
