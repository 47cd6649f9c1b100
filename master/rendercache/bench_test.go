package rendercache

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

// renderCost is the simulated render's fixed cost (a small real page
// takes far longer; this keeps the ratio conservative).
const renderCost = 20 * time.Millisecond

// BenchmarkHitVsMiss measures, in the same run, a synchronous Get that
// misses (reserve, a simulated render of fixed cost, Complete with a
// 100 KB body into a bbolt file, wake) against Gets that hit the entry
// it left; it reports both latencies and their ratio.
func BenchmarkHitVsMiss(b *testing.B) {
	st, err := state.Open(filepath.Join(b.TempDir(), state.FileName))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	c, err := New(Config{Store: st, Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	body := bytes.Repeat([]byte("p"), 100<<10)
	ctx := context.Background()
	const hitsPerMiss = 20
	var missT, hitT time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sig, cu, _ := Key(specFor(i), false, nil)
		t0 := time.Now()
		_, out, err := c.Get(ctx, sig, cu, GetOptions{}, func(_ context.Context, h string) error {
			time.Sleep(renderCost) // the simulated render
			_, _, err := c.Complete(sig, h, Render{ContentType: "image/png", Body: body})
			return err
		})
		missT += time.Since(t0)
		if err != nil || out != Miss {
			b.Fatalf("miss: %v %v", out, err)
		}
		t0 = time.Now()
		for range hitsPerMiss {
			if _, out, err := c.Get(ctx, sig, cu, GetOptions{}, nil); err != nil || out != Hit {
				b.Fatalf("hit: %v %v", out, err)
			}
		}
		hitT += time.Since(t0)
	}
	missNs := float64(missT.Nanoseconds()) / float64(b.N)
	hitNs := float64(hitT.Nanoseconds()) / float64(b.N*hitsPerMiss)
	b.ReportMetric(missNs, "miss-ns")
	b.ReportMetric(hitNs, "hit-ns")
	b.ReportMetric(missNs/hitNs, "miss/hit")
}
