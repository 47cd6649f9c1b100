package registry

import (
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// BenchmarkUserInstances: the landing page's listing (owned and shared
// instances of one user). It varies one thing at a time, so each group's
// figures compare within one run: "table" grows the instance table under a
// fixed listing (with the per-user index the cost should not follow it),
// "listed" grows the user's listing in a fixed table (the cost should).
func BenchmarkUserInstances(b *testing.B) {
	for _, n := range []int{100, 10_000, 100_000} {
		b.Run(fmt.Sprintf("table=%d/listed=40", n), func(b *testing.B) { benchUserInstances(b, n, 20, 20) })
	}
	for _, listed := range []int{40, 400, 4000} {
		b.Run(fmt.Sprintf("listed=%d/table=100000", listed), func(b *testing.B) {
			benchUserInstances(b, 100_000, listed/2, listed/2)
		})
	}
}

// benchUserInstances fills a table of n instances, of which user7 owns
// owned and is a reader of shared, spread over the table, and times
// user7's listing.
func benchUserInstances(b *testing.B, n, owned, shared int) {
	m, err := New(Config{Logger: zerolog.Nop(), Apps: AppsFunc(func(string) (wire.App, bool) { return wire.App{}, false })})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	step := n / (owned + shared)
	for i := range n {
		// 1000 other users own the rest.
		in := wire.InstanceInfo{ID: fmt.Sprintf("w-a.%012d", i), App: "multi", Owner: fmt.Sprintf("user%d", 1000+i%1000),
			Worker: "w-a", Created: now.Add(time.Duration(i))}
		if k := i / step; i%step == 0 && k < owned {
			in.Owner = "user7"
		} else if i%step == 0 && k < owned+shared {
			in.Shared = map[string]string{"user7": "reader"}
		}
		m.addInstanceLocked(in, "", "", false)
	}
	if got := len(m.UserInstances("multi", "user7")); got != owned+shared {
		b.Fatalf("user7 lists %d instances, want %d", got, owned+shared)
	}
	b.ResetTimer()
	for b.Loop() {
		m.UserInstances("multi", "user7")
	}
}
