package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// TestMigrationTiming measures a drain with migration of one chat room with
// 1 and with 5 browsers: how long the migration takes, and for each user
// the time from the "moved" notice to the first frame on the new worker.
// It is a measurement (scripts/bench/migration.sh), run only with
// CB_BENCH_MIGRATION=1.
func TestMigrationTiming(t *testing.T) {
	if os.Getenv("CB_BENCH_MIGRATION") != "1" {
		t.Skip("a benchmark: CB_BENCH_MIGRATION=1 scripts/bench/migration.sh")
	}
	needChromium(t)
	apps, _ := filepath.Abs("../../apps")
	for _, n := range []int{1, 5} {
		c := startCluster(t, clusterOpts{proxies: 1, workers: 2, runtime: "chromium", extra: []string{"--apps", apps}})
		base := "http://" + c.public
		type viewer struct {
			ch    *chatter
			gap   time.Duration
			moved time.Time
		}
		var vs []*viewer
		for range n {
			u := newUser(t, base)
			path := lastHop(t, u.open("/chat"))
			vs = append(vs, &viewer{ch: &chatter{u: u, url: "ws://" + c.public + path + "/ws"}})
		}
		room := instanceOf(t, lastHop(t, vs[0].ch.u.open("/chat")))
		from := instanceWorker(c.mustStatus(), room)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		ready := make(chan struct{}, n)
		for _, v := range vs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				conn := v.ch.dial(ctx)
				if conn == nil {
					return
				}
				ready <- struct{}{}
				for { // until moved
					_, data, err := conn.ReadMessage()
					if err != nil {
						return
					}
					var m struct{ T string }
					if json.Unmarshal(data, &m) == nil && m.T == "moved" {
						v.moved = time.Now()
						break
					}
				}
				conn.Close()
				for ctx.Err() == nil {
					if conn = v.ch.dial(ctx); conn != nil {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
				if conn == nil {
					return
				}
				defer conn.Close()
				for {
					mt, _, err := conn.ReadMessage()
					if err != nil {
						return
					}
					if mt == websocket.BinaryMessage {
						v.gap = time.Since(v.moved)
						return
					}
				}
			}()
		}
		for range n {
			<-ready
		}
		time.Sleep(6 * time.Second) // snapshots taken, pages idle
		req, _ := http.NewRequest(http.MethodPost, "http://"+c.admin+"/api/v1/workers/"+from+"/drain?migrate=true", nil)
		req.Header.Set("Authorization", "Bearer "+c.token)
		t0 := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		took := time.Since(t0)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
		}
		cancel()
		wg.Wait()
		var gaps []time.Duration
		for _, v := range vs {
			gaps = append(gaps, v.gap)
		}
		slices.Sort(gaps)
		t.Logf("migration of a room with %d browsers: %v (HTTP %d); moved → first frame: p50 %v, max %v",
			n, took.Round(time.Millisecond), resp.StatusCode, gaps[len(gaps)/2].Round(time.Millisecond), gaps[len(gaps)-1].Round(time.Millisecond))
		c.shutdown()
	}
}
