// Command filesbench measures files crossing a virtual browser's door: a
// 10 MiB upload to the page's file picker and a 10 MiB download of the
// page, each through the proxy as a user's engine does, against the same
// bytes over plain HTTP on this host in the same run (a Go server that
// writes the upload to a file, and serves the download from one).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/scripts/bench/internal/engineclient"
)

const size = 10 << 20

func main() {
	public := flag.String("public", "http://127.0.0.1:8080", "public (proxy) URL")
	app := flag.String("app", "transfers", "app mount point (a file input at 20..320 x 40..80, a 10 MiB download button at 20..320 x 120..160)")
	rounds := flag.Int("rounds", 5, "uploads and downloads measured")
	flag.Parse()
	if err := run(*public, *app, *rounds); err != nil {
		log.Fatalf("filesbench: %v", err)
	}
}

// engine is the socket of one user's client engine, reading the text
// messages the benchmark waits for.
type engine struct {
	conn *websocket.Conn
	msgs chan map[string]any
}

func (e *engine) input(m map[string]any) error {
	m["t"] = "input"
	return e.conn.WriteJSON(m)
}

func (e *engine) click(x, y float64) error {
	if err := e.input(map[string]any{"type": "mousedown", "x": x, "y": y, "button": "left", "buttons": 1, "clickCount": 1}); err != nil {
		return err
	}
	return e.input(map[string]any{"type": "mouseup", "x": x, "y": y, "button": "left", "clickCount": 1})
}

// wait is the next message of kind for which ok holds.
func (e *engine) wait(ctx context.Context, kind string, ok func(map[string]any) bool) (map[string]any, error) {
	for {
		select {
		case m, open := <-e.msgs:
			if !open {
				return nil, errors.New("socket closed")
			}
			if m["t"] == kind && ok(m) {
				return m, nil
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %s: %w", kind, ctx.Err())
		}
	}
}

func run(public, app string, rounds int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	path, cookies, err := engineclient.Open(ctx, public, app)
	if err != nil {
		return err
	}
	pu, err := url.Parse(public)
	if err != nil {
		return err
	}
	conn, err := engineclient.Dial(ctx, pu.Host, path, cookies, nil)
	if err != nil {
		return err
	}
	defer conn.Close()
	e := &engine{conn: conn, msgs: make(chan map[string]any, 256)}
	go func() {
		defer close(e.msgs)
		for {
			typ, data, err := conn.ReadMessage()
			if err != nil {
				return
			}
			if typ == websocket.BinaryMessage {
				if f, err := engineclient.ParseFrame(data, time.Now()); err == nil {
					_ = conn.WriteJSON(map[string]any{"t": "ack", "seq": f.Seq})
				}
				continue
			}
			var m map[string]any
			if json.Unmarshal(data, &m) == nil {
				e.msgs <- m
			}
		}
	}()
	if err := e.input(map[string]any{"type": "resize", "width": 1000, "height": 700}); err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // the page loads and settles

	plain, err := startPlain()
	if err != nil {
		return err
	}
	defer plain.Close()
	body, ctype := multipartBody()
	client := &http.Client{Timeout: 2 * time.Minute}
	post := func(u string) (time.Duration, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("Origin", public)
		for _, c := range cookies {
			req.AddCookie(c)
		}
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return 0, fmt.Errorf("POST %s: %s %s", u, resp.Status, msg)
		}
		return time.Since(t0), nil
	}
	get := func(u string) (time.Duration, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		for _, c := range cookies {
			req.AddCookie(c)
		}
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || n != size {
			return 0, fmt.Errorf("GET %s: %s, %d bytes, %v", u, resp.Status, n, err)
		}
		return time.Since(t0), nil
	}

	var up, upPlain, down, downPlain []time.Duration
	for i := range rounds {
		// The page opens its picker; the upload answers it.
		if err := e.click(150, 60); err != nil {
			return err
		}
		m, err := e.wait(ctx, "fileChooser", func(map[string]any) bool { return true })
		if err != nil {
			return err
		}
		d, err := post(fmt.Sprintf("%s%s/files/up/%v", public, path, m["id"]))
		if err != nil {
			return err
		}
		up = append(up, d)
		if d, err = post(plain.URL() + "/upload"); err != nil {
			return err
		}
		upPlain = append(upPlain, d)

		// The page downloads; the user fetches it.
		if err := e.click(150, 140); err != nil {
			return err
		}
		m, err = e.wait(ctx, "download", func(m map[string]any) bool { return m["state"] != "inProgress" })
		if err != nil {
			return err
		}
		if m["state"] != "completed" {
			return fmt.Errorf("download %v", m)
		}
		if d, err = get(fmt.Sprintf("%s%s/files/down/%v", public, path, m["id"])); err != nil {
			return err
		}
		down = append(down, d)
		if d, err = get(plain.URL() + "/download"); err != nil {
			return err
		}
		downPlain = append(downPlain, d)
		log.Printf("round %d: up %v (plain %v), down %v (plain %v)", i+1, up[i], upPlain[i], down[i], downPlain[i])
	}
	report := func(name string, got, base []time.Duration) {
		g, b := median(got), median(base)
		fmt.Printf("%-26s %8.1f MiB/s  (median %6.1f ms)   plain HTTP %8.1f MiB/s (%6.1f ms)   ratio %.2fx\n",
			name, mibps(g), ms(g), mibps(b), ms(b), mibps(g)/mibps(b))
	}
	fmt.Printf("files through the browser's door, 10 MiB, %d rounds, medians; ratio = throughput / plain HTTP's in the same run\n", rounds)
	report("upload to a file picker", up, upPlain)
	report("download of the page", down, downPlain)
	return nil
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64    { return float64(d.Microseconds()) / 1000 }
func mibps(d time.Duration) float64 { return float64(size) / (1 << 20) / d.Seconds() }

// multipartBody is a 10 MiB file as a multipart upload.
func multipartBody() ([]byte, string) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	pw, _ := w.CreateFormFile("file", "ten.bin")
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i)
	}
	_, _ = pw.Write(data)
	_ = w.Close()
	return buf.Bytes(), w.FormDataContentType()
}

// plainServer is the baseline: the same bytes over plain HTTP on this
// host, written to and served from a file as the worker does.
type plainServer struct {
	ln  net.Listener
	srv *http.Server
	dir string
}

func (p *plainServer) URL() string { return "http://" + p.ln.Addr().String() }

func (p *plainServer) Close() {
	_ = p.srv.Close()
	_ = os.RemoveAll(p.dir)
}

func startPlain() (*plainServer, error) {
	dir, err := os.MkdirTemp("", "filesbench-")
	if err != nil {
		return nil, err
	}
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i)
	}
	if err := os.WriteFile(filepath.Join(dir, "ten.bin"), data, 0o600); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /upload", func(w http.ResponseWriter, r *http.Request) {
		mr, err := r.MultipartReader()
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for {
			part, err := mr.NextPart()
			if err != nil {
				break
			}
			f, err := os.CreateTemp(dir, "up-")
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			_, _ = io.Copy(f, part)
			f.Close()
			_ = os.Remove(f.Name())
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /download", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFile(w, r, filepath.Join(dir, "ten.bin"))
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &plainServer{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, dir: dir}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}
