package chromium

import (
	"context"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/procfs"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/procmem"
)

// BenchmarkStatsPSS: what a load report's memory reading costs with 10
// live browsers, reading every process's PSS (uncached, as before) and
// with the cache (within the cache's age limit and with steady RSS, no smaps_rollup).
func BenchmarkStatsPSS(b *testing.B) {
	rt := shared(b)
	ctx := context.Background()
	for range 10 {
		br, err := rt.NewBrowser(ctx, browser.Options{URL: "data:text/html,<p>hello"})
		if err != nil {
			b.Fatal(err)
		}
		defer br.Close(ctx)
	}
	rt.mu.Lock()
	var pids []int
	for _, s := range rt.slots {
		if s.proc != nil {
			pids = append(pids, s.proc.pid)
		}
	}
	rt.mu.Unlock()
	for _, bc := range []struct {
		name   string
		cached bool
	}{{"uncached", false}, {"cached", true}} {
		b.Run(bc.name, func(b *testing.B) {
			var c procmem.Cache
			now := time.Now()
			for b.Loop() {
				procs, err := procfs.ReadAll()
				if err != nil {
					b.Fatal(err)
				}
				if !bc.cached {
					c = procmem.Cache{}
				}
				if n, _ := c.Usage(procs, pids, now); n == 0 {
					b.Fatal("no processes")
				}
			}
		})
	}
}
