package cdpgate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"
)

// The gate's cost per command, without Chromium: a fake upstream answers
// every command at once (Runtime.evaluate with what Chromium answers for
// "1"), so what is left is the gate's parsing, checking, re-encoding, id
// mapping and two WebSocket hops, against the same client talking to the
// fake directly (one hop). scripts/bench/automation.sh measures the whole
// path with a real Chromium; this is where its gate share is profiled:
//
//	go test ./worker/cdpgate -run '^$' -bench GatePipelined -benchtime 20000x -count 3
//	go test ./worker/cdpgate -run '^$' -bench 'GatePipelined/gate/depth=64' -benchtime 100000x -cpuprofile /tmp/gate.prof
//	go tool pprof -top -cum -nodecount 60 /tmp/gate.prof
//
// cpu-µs/cmd is the whole test process's CPU per command (client, fake and
// gate): gate/ less direct/ is what the gate adds.
func BenchmarkGatePipelined(b *testing.B) {
	for _, depth := range []int{1, 16, 64} {
		for _, gated := range []bool{false, true} {
			name := "direct"
			if gated {
				name = "gate"
			}
			b.Run(fmt.Sprintf("%s/depth=%d", name, depth), func(b *testing.B) {
				up := fakeUpstream(b)
				url := up
				if gated {
					url = gateServer(b, up)
				}
				ws, _, err := websocket.DefaultDialer.Dial(url, nil)
				if err != nil {
					b.Fatal(err)
				}
				defer ws.Close()
				session := attachForBench(b, ws)
				b.ReportAllocs()
				b.ResetTimer()
				t0, cpu0 := time.Now(), cpuTime(b)
				pipeline(b, ws, session, depth, b.N)
				b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "commands/s")
				// The whole process's CPU: client, fake Chromium and (gate/) the
				// gate; gate/ less direct/ is the gate's own.
				b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/cmd")
			})
		}
	}
}

const (
	fakeContext = "CTX-PRIMARY"
	fakeTarget  = "TARGET-PAGE"
	fakeSession = "SESSION-PAGE"
)

// fakeUpstream is a Chromium that answers at once: Target.getTargetInfo
// (the page is in the primary context), Target.attachToTarget, and every
// other command with the result Chromium gives Runtime.evaluate("1").
func fakeUpstream(b *testing.B) string {
	up := websocket.Upgrader{}
	var wg sync.WaitGroup
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		wg.Add(1)
		defer wg.Done()
		defer ws.Close()
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				return
			}
			var m struct {
				ID        int64  `json:"id"`
				Method    string `json:"method"`
				SessionID string `json:"sessionId"`
			}
			if json.Unmarshal(data, &m) != nil {
				return
			}
			var result string
			switch m.Method {
			case "Target.getTargetInfo":
				result = `{"targetInfo":{"targetId":"` + fakeTarget + `","type":"page","title":"","url":"about:blank","attached":false,"canAccessOpener":false,"browserContextId":"` + fakeContext + `"}}`
			case "Target.attachToTarget":
				result = `{"sessionId":"` + fakeSession + `"}`
			default:
				result = `{"result":{"type":"number","value":1,"description":"1"}}`
			}
			out := `{"id":` + strconv.FormatInt(m.ID, 10) + `,"result":` + result
			if m.SessionID != "" {
				out += `,"sessionId":"` + m.SessionID + `"`
			}
			if ws.WriteMessage(websocket.TextMessage, []byte(out+"}")) != nil {
				return
			}
		}
	}))
	b.Cleanup(func() { srv.CloseClientConnections(); srv.Close(); wg.Wait() })
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

// cpuTime is the CPU time the process used so far (user and system).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// gateServer serves the gate in front of upstream.
func gateServer(b *testing.B, upstream string) string {
	ctx, cancel := context.WithCancelCause(context.Background())
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := Upgrade(&up, w, r, nil)
		if err != nil {
			return
		}
		if _, err := Serve(ctx, ws, Config{Upstream: upstream, Context: fakeContext, Page: fakeTarget, Log: zerolog.Nop()}); err != nil {
			b.Error(err)
		}
	}))
	b.Cleanup(func() { cancel(errors.New("benchmark over")); srv.Close() })
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

// attachForBench attaches to the page as a client does (through the gate:
// an ownership check upstream) and returns the session.
func attachForBench(b *testing.B, ws *websocket.Conn) string {
	if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"id":1,"method":"Target.attachToTarget","params":{"targetId":"`+fakeTarget+`","flatten":true}}`)); err != nil {
		b.Fatal(err)
	}
	_, data, err := ws.ReadMessage()
	if err != nil {
		b.Fatal(err)
	}
	var r struct {
		Result struct {
			SessionID string `json:"sessionId"`
		} `json:"result"`
	}
	if json.Unmarshal(data, &r) != nil || r.Result.SessionID == "" {
		b.Fatalf("attach: %s", data)
	}
	return r.Result.SessionID
}

// pipeline sends n evaluations with up to depth unanswered, as
// scripts/bench/cmd/cdpbench does.
func pipeline(b *testing.B, ws *websocket.Conn, session string, depth, n int) {
	slots := make(chan struct{}, depth)
	werr := make(chan error, 1)
	go func() {
		for i := range n {
			slots <- struct{}{}
			f := `{"id":` + strconv.Itoa(i+2) + `,"method":"Runtime.evaluate","params":{"expression":"1","returnByValue":true},"sessionId":"` + session + `"}`
			if err := ws.WriteMessage(websocket.TextMessage, []byte(f)); err != nil {
				werr <- err
				return
			}
		}
		werr <- nil
	}()
	for range n {
		_, data, err := ws.ReadMessage()
		if err != nil {
			b.Fatal(err)
		}
		if !strings.Contains(string(data), `"result":{"result"`) {
			b.Fatalf("reply: %s", data)
		}
		<-slots
	}
	if err := <-werr; err != nil {
		b.Fatal(err)
	}
}
