package worker

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/worker/engine"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
)

func TestSocketOrigin(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"", "", ""},
		{"https://w2.example.com", "https://w2.example.com", ""},
		{"http://10.0.0.2:8080/", "http://10.0.0.2:8080", ""},
		{"ftp://w2", "", "want an http:// or https:// address"},
		{"https://", "", "has no host"},
		{"https://w2/sockets", "", "want only scheme, host and port"},
		{"https://u:p@w2", "", "want only scheme, host and port"},
		{"https://w2?x=1", "", "want only scheme, host and port"},
		{"://", "", "is not a URL"},
	} {
		got, err := socketOrigin(tc.in)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("socketOrigin(%q) = %q, %v; want %q, an error with %q", tc.in, got, err, tc.want, tc.err)
		}
		if err != nil && !strings.Contains(err.Error(), "SocketURL") {
			t.Errorf("socketOrigin(%q): %v does not name the field", tc.in, err)
		}
	}
}

// TestTicketedSocket: with a socket URL, the engine page carries it and a
// ticket; the socket opens there without the page's cookie, as the page's
// user, once per ticket and only from the page's origin; the engine asks
// for a new ticket on its socket's path.
func TestTicketedSocket(t *testing.T) {
	f := newHubFixture(t, httpserve.RoleReader, func(w *Worker) {
		w.cfg.SocketURL = "https://sockets.example:8443"
		w.front = w.newFront()
	})
	get := func(path string, cookie bool) (int, []byte) {
		req, _ := http.NewRequest("GET", f.srv.URL+path, nil)
		if cookie {
			req.AddCookie(f.cookie)
		}
		resp, err := f.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	code, html := get(f.loc, true)
	at := regexp.MustCompile(`data-socket-at="([^"]*)" data-ticket="([^"]*)"`).FindStringSubmatch(string(html))
	if code != http.StatusOK || at == nil {
		t.Fatalf("engine page %d without a socket URL and ticket:\n%s", code, html)
	}
	if want := "wss://sockets.example:8443" + f.loc + "/ws"; at[1] != want {
		t.Fatalf("socket URL %q, want %q", at[1], want)
	}
	wsURL := "ws" + strings.TrimPrefix(f.srv.URL, "http") + f.loc + "/ws"
	dial := func(ticket, origin string) (*websocket.Conn, int) {
		h := http.Header{"Origin": {origin}}
		d := websocket.Dialer{Subprotocols: []string{engine.SocketProtocol, engine.TicketPrefix + ticket}}
		conn, resp, err := d.Dial(wsURL, h)
		if err != nil {
			if resp == nil {
				t.Fatal(err)
			}
			return nil, resp.StatusCode
		}
		t.Cleanup(func() { conn.Close() })
		return conn, http.StatusSwitchingProtocols
	}
	// Another site's page cannot use the ticket; the page's origin can,
	// once, and the socket is the owner's (not read-only).
	if _, code := dial(at[2], "https://evil.example"); code != http.StatusForbidden {
		t.Fatalf("ticket from another origin: %d, want 403", code)
	}
	conn, code := dial(at[2], f.srv.URL)
	if conn == nil {
		t.Fatalf("ticketed handshake: %d", code)
	}
	if conn.Subprotocol() != engine.SocketProtocol {
		t.Fatalf("subprotocol %q, want %q", conn.Subprotocol(), engine.SocketProtocol)
	}
	var hello map[string]any
	if err := conn.ReadJSON(&hello); err != nil || hello["t"] != "hello" || hello["readOnly"] == true {
		t.Fatalf("hello %v %v", hello, err)
	}
	if _, code := dial(at[2], f.srv.URL); code != http.StatusForbidden {
		t.Fatalf("a ticket used twice: %d, want 403", code)
	}
	if _, code := dial("forged."+strings.Repeat("A", 43), f.srv.URL); code != http.StatusForbidden {
		t.Fatalf("a forged ticket: %d, want 403", code)
	}

	// Reconnecting: the socket's path, fetched, gives a fresh ticket to
	// the owner and nothing to someone the browser is not shared with.
	info := func(cookie bool) (int, map[string]string) {
		code, b := get(f.loc+"/ws", cookie)
		var m map[string]string
		_ = json.Unmarshal(b, &m)
		return code, m
	}
	code, m := info(true)
	if code != http.StatusOK || m["url"] != at[1] || m["ticket"] == "" || m["ticket"] == at[2] {
		t.Fatalf("socket info %d %v", code, m)
	}
	if conn, code := dial(m["ticket"], f.srv.URL); conn == nil {
		t.Fatalf("the fresh ticket: %d", code)
	}
	shareWithAnyone(f.w, f.iid, httpserve.RoleNone)
	if code, m := info(false); code != http.StatusForbidden || m["ticket"] != "" {
		t.Fatalf("socket info for a stranger: %d %v", code, m)
	}
}
