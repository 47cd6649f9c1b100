package cdpgate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
)

// TestScanCommand: the light path takes only frames whose envelope is
// unambiguous, and then reads what parseCommand reads; the rest go to
// parseCommand, whose verdict stands.
func TestScanCommand(t *testing.T) {
	tests := []struct {
		name  string
		frame string
		light bool
	}{
		{"plain", `{"id":3,"method":"Runtime.evaluate","params":{"expression":"1"},"sessionId":"S1"}`, true},
		{"spaces", " {\n \"id\" : -4 , \"method\":\"Page.enable\" , \"sessionId\" : null , \"params\" : null }\t", true},
		{"no params", `{"id":1,"method":"Browser.getVersion"}`, true},
		{"escapes inside params", `{"id":1,"method":"Runtime.evaluate","params":{"expression":"\"a\\\"b\",\"sessionId\":\"X\"","n":[1,{"}":"{"}]},"sessionId":"S"}`, true},
		{"duplicate sessionId", `{"id":1,"method":"Runtime.evaluate","sessionId":"S","sessionId":"T"}`, false},
		{"duplicate method", `{"id":1,"method":"Runtime.evaluate","method":"Target.getTargets"}`, false},
		{"escaped key", `{"id":1,"method":"Runtime.evaluate","session\u0049d":"S"}`, false},
		{"escaped method", `{"id":1,"method":"Runtime.evalu\u0061te"}`, false},
		{"non-ASCII session", `{"id":1,"method":"Runtime.evaluate","sessionId":"é"}`, false},
		{"unknown member", `{"id":1,"method":"Runtime.evaluate","extra":1}`, false},
		{"exponent id", `{"id":1e2,"method":"Runtime.evaluate"}`, false},
		{"fraction id", `{"id":1.5,"method":"Runtime.evaluate"}`, false},
		{"string id", `{"id":"1","method":"Runtime.evaluate"}`, false},
		{"params array", `{"id":1,"method":"Runtime.evaluate","params":[]}`, false},
		{"no method", `{"id":1}`, false},
		{"empty method", `{"id":1,"method":""}`, false},
		{"trailing data", `{"id":1,"method":"Browser.getVersion"} {"id":2}`, false},
		{"not JSON", `{"id":1,"method":"Browser.getVersion"`, false},
		{"array", `[1,2]`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte(tt.frame)
			c, err := scanCommand(data)
			if got := err == nil; got != tt.light {
				t.Fatalf("light path %v (%v), want %v", got, err, tt.light)
			}
			if !tt.light {
				return
			}
			want, err := parseCommand(data)
			if err != nil {
				t.Fatalf("the light path took what parseCommand refuses: %v", err)
			}
			if c.id != want.id || c.method != want.method || c.session != want.session {
				t.Fatalf("light %+v, parseCommand %+v", c, want)
			}
			// What Chromium gets is what parseCommand's path would send.
			light := appendCommand(nil, 9, c)
			full, _ := encodeCommand(9, want.method, want.session, want.params)
			if !sameJSON(t, light, full) {
				t.Fatalf("forwards %s, parseCommand's path %s", light, full)
			}
			if err := c.decodeParams(); err != nil || !reflect.DeepEqual(c.params, want.params) {
				t.Fatalf("params %v %v, want %v", c.params, err, want.params)
			}
		})
	}
}

func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	for _, p := range []struct {
		data []byte
		v    *any
	}{{a, &x}, {b, &y}} {
		dec := json.NewDecoder(bytes.NewReader(p.data))
		dec.UseNumber()
		if err := dec.Decode(p.v); err != nil {
			t.Fatalf("%s: %v", p.data, err)
		}
	}
	return reflect.DeepEqual(x, y)
}

// TestScanUp: Chromium's frames read as json.Unmarshal reads them.
func TestScanUp(t *testing.T) {
	for _, frame := range []string{
		`{"id":12,"result":{"result":{"type":"number","value":1,"description":"1"}},"sessionId":"AB12"}`,
		`{"id":13,"error":{"code":-32601,"message":"'X' wasn't found"}}`,
		`{"method":"Runtime.consoleAPICalled","params":{"args":[{"value":"a\"}b\\"}]},"sessionId":"AB12"}`,
		`{"method":"Target.targetCreated","params":{"targetInfo":{"targetId":"T","browserContextId":"C"}}}`,
		`{"method":"Odd.event","params":{},"sessionId":"with \"quote\""}`,
	} {
		var got, want upMessage
		if err := scanUp([]byte(frame), &got); err != nil {
			t.Fatalf("%s: %v", frame, err)
		}
		if err := json.Unmarshal([]byte(frame), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.detach(), want.detach()) {
			t.Errorf("%s:\n got %+v\nwant %+v", frame, got, want)
		}
	}
}

// TestFrames: the frames the gate writes itself are read back by gorilla
// as sent, masked (to Chromium) or not (to the client), in every length
// encoding.
func TestFrames(t *testing.T) {
	for _, n := range []int{0, 1, 125, 126, 65535, 65536, 200000} {
		for _, mask := range []bool{false, true} {
			payload := []byte(strings.Repeat("0123456789abcdef", n/16+1)[:n])
			b := appendFrame(nil, opText, payload, mask)
			b = appendFrame(b, opText, []byte("next"), mask)
			got := readFrames(t, b, mask)
			if len(got) != 2 || !bytes.Equal(got[0], payload) || string(got[1]) != "next" {
				t.Fatalf("n=%d mask=%v: read %d frames", n, mask, len(got))
			}
		}
	}
}

// readFrames reads data as the far end would: a server reads masked
// frames, a client unmasked ones.
func readFrames(t *testing.T, data []byte, masked bool) [][]byte {
	t.Helper()
	server, client := websocketPair(t)
	reader, writer := client, server
	if masked {
		reader, writer = server, client
	}
	go func() {
		writer.NetConn().Write(data)
		writer.NetConn().Close()
	}()
	var out [][]byte
	for {
		_, m, err := reader.ReadMessage()
		if err != nil {
			return out
		}
		out = append(out, m)
	}
}

// websocketPair is a connected server and client.
func websocketPair(t *testing.T) (*websocket.Conn, *websocket.Conn) {
	t.Helper()
	got := make(chan *websocket.Conn, 1)
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- ws
	}))
	t.Cleanup(srv.Close)
	client, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	server := <-got
	if server == nil {
		t.Fatal("no server connection")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return server, client
}

// TestEnvelopeTricks: through a real Chromium, a frame whose envelope
// could be read two ways is decided, and forwarded, on one reading (the
// last of duplicate members, keys unescaped), and params with escaped
// quotes pass as sent.
func TestEnvelopeTricks(t *testing.T) {
	f := newFixture(t, nil)
	c := f.client()
	_, s := ownPage(t, c, `data:text/html,<title>mine</title>`)
	if got := c.evaluate(s, `"a\"},\"sessionId\":\"X"`); got != `a"},"sessionId":"X` {
		t.Errorf("evaluate: %v", got)
	}
	for _, tt := range []struct {
		name, frame, refused string
	}{
		{"duplicate method", `{"id":%d,"method":"Runtime.evaluate","sessionId":"` + s + `","method":"Target.getTargets"}`,
			"Target.getTargets is not allowed by the automation gate"},
		{"escaped method key", `{"id":%d,"method":"Runtime.evaluate","\u006dethod":"Target.getTargets","sessionId":"` + s + `"}`,
			"Target.getTargets is not allowed by the automation gate"},
		{"duplicate sessionId", `{"id":%d,"method":"Runtime.evaluate","params":{"expression":"1"},"sessionId":"` + s + `","sessionId":"NOT-MINE"}`,
			errNoSession.Message},
		{"escaped sessionId key", `{"id":%d,"method":"Runtime.evaluate","params":{"expression":"1"},"sessionId":"` + s + `","session\u0049d":"NOT-MINE"}`,
			errNoSession.Message},
	} {
		r := rawCommand(t, c, tt.frame)
		if r.Error == nil || r.Error.Message != tt.refused {
			t.Errorf("%s: %+v %s, want refused with %q", tt.name, r.Error, r.Result, tt.refused)
		}
	}
	if got := c.evaluate(s, "6*7"); got != float64(42) { // the session still works
		t.Errorf("evaluate: %v", got)
	}
}

// rawCommand sends frame (its id a %d) and returns the reply.
func rawCommand(t *testing.T, c *cdpConn, frame string) reply {
	t.Helper()
	ch := make(chan reply, 1)
	c.mu.Lock()
	c.nextID++
	id := c.nextID
	c.waiting[id] = ch
	c.mu.Unlock()
	c.send(fmt.Sprintf(frame, id))
	select {
	case r, ok := <-ch:
		if !ok {
			t.Fatalf("connection closed: %v", c.err())
		}
		return r
	case <-time.After(testutil.Scale(30 * time.Second)):
		t.Fatalf("no reply to %s", frame)
		return reply{}
	}
}
