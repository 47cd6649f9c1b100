package proxy

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gorilla/websocket"
)

// Run both pairs in one go and read the ratios off the ns/op and MB/s columns:
//
//	go test -run '^$' -bench . -benchmem ./proxy/

func tinyHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "hello, cloudbrowser\n")
	})
}

func benchGet(b *testing.B, url string) {
	c := client(b)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		resp, err := c.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

func BenchmarkDirectHTTP(b *testing.B) {
	srv := httptest.NewServer(tinyHandler())
	defer srv.Close()
	benchGet(b, srv.URL+"/chat/a/"+testInstance+"/r")
}

func BenchmarkProxyHTTP(b *testing.B) {
	route := startWorker(b, tinyHandler())
	_, srv := startProxy(b, Config{Router: NewCachingRouter(&fakeRouter{route: route}, 1<<62)})
	benchGet(b, srv.URL+"/chat/a/"+testInstance+"/r")
}

const wsMsg = 64 << 10

func benchWS(b *testing.B, url string) {
	c := dialWS(b, url, nil)
	msg := bytes.Repeat([]byte{0xab}, wsMsg)
	b.SetBytes(wsMsg)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := c.WriteMessage(websocket.BinaryMessage, msg); err != nil {
			b.Fatal(err)
		}
		if _, r, err := c.NextReader(); err != nil {
			b.Fatal(err)
		} else if n, _ := io.Copy(io.Discard, r); n != wsMsg {
			b.Fatalf("echo %d bytes", n)
		}
	}
	b.StopTimer()
	c.Close()
}

func BenchmarkWSDirect(b *testing.B) {
	srv := httptest.NewServer(newWSEcho())
	defer srv.Close()
	benchWS(b, wsURL(srv.URL, wsPath))
}

func BenchmarkWSRelay(b *testing.B) {
	route := startWorker(b, newWSEcho())
	_, srv := startProxy(b, Config{Router: &fakeRouter{route: route}})
	benchWS(b, wsURL(srv.URL, wsPath))
}
