package worker

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"
)

// Client engine protocol (JSON text messages; screen frames will be binary):
//
//	server->client {"t":"hello", browser, instance, app, worker, page{url,title}, readOnly}
//	               {"t":"page", url, title}
//	               {"t":"pong", seq, data}
//	               {"t":"closed", reason, reload}
//	               {"t":"error", message}
//	client->server {"t":"ping", seq, data}
//	               {"t":"nav", action: back|forward|reload}
const (
	maxClientMessage = 64 << 10
	writeWait        = 10 * time.Second
	pongWait         = 60 * time.Second
	pingEvery        = pongWait * 9 / 10
	sendQueue        = 64
)

type wsMsg struct {
	T        string         `json:"t"`
	Seq      int64          `json:"seq,omitempty"`
	Data     string         `json:"data,omitempty"`
	Action   string         `json:"action,omitempty"`
	Browser  string         `json:"browser,omitempty"`
	Instance string         `json:"instance,omitempty"`
	App      string         `json:"app,omitempty"`
	Worker   string         `json:"worker,omitempty"`
	Page     map[string]any `json:"page,omitempty"`
	ReadOnly bool           `json:"readOnly,omitempty"`
	Reason   string         `json:"reason,omitempty"`
	Reload   bool           `json:"reload,omitempty"`
	Message  string         `json:"message,omitempty"`
}

// hub is the set of client engines connected to one virtual browser.
type hub struct {
	vb  *vbrowser
	log zerolog.Logger

	mu      sync.Mutex
	clients map[*client]struct{}
	closed  bool
	reason  string
}

type client struct {
	conn     *websocket.Conn
	send     chan []byte
	done     chan struct{}
	once     sync.Once
	readOnly bool
}

func newHub(vb *vbrowser, log zerolog.Logger) *hub {
	return &hub{vb: vb, clients: map[*client]struct{}{},
		log: log.With().Str("browser", vb.id).Str("instance", vb.inst.info.ID).Logger()}
}

func (h *hub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.clients)
}

var upgrader = websocket.Upgrader{
	ReadBufferSize:  4096,
	WriteBufferSize: 16 << 10,
	// The default CheckOrigin (same host) applies: proxies keep Host.
}

// serve upgrades r and runs the client until it disconnects.
func (h *hub) serve(w http.ResponseWriter, r *http.Request, workerID string, readOnly bool) {
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrade already answered with an error status
	}
	conn.SetReadLimit(maxClientMessage)
	c := &client{conn: conn, send: make(chan []byte, sendQueue), done: make(chan struct{}), readOnly: readOnly}
	h.mu.Lock()
	if h.closed {
		reason := h.reason
		h.mu.Unlock()
		h.writeClosed(conn, reason)
		return
	}
	h.clients[c] = struct{}{}
	h.mu.Unlock()
	h.log.Debug().Str("request_id", r.Header.Get("X-Request-Id")).Bool("read_only", readOnly).Msg("client connected")

	p := h.vb.b.Page()
	c.enqueue(mustJSON(wsMsg{T: "hello", Browser: h.vb.id, Instance: h.vb.inst.info.ID, App: h.vb.inst.app.MountPoint,
		Worker: workerID, Page: map[string]any{"url": p.URL, "title": p.Title}, ReadOnly: readOnly}))

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); h.writeLoop(c) }()
	h.readLoop(c)
	c.stop()
	wg.Wait()
	h.mu.Lock()
	delete(h.clients, c)
	h.mu.Unlock()
	conn.Close()
}

func (c *client) stop() { c.once.Do(func() { close(c.done) }) }

// enqueue never blocks the sender: a client that cannot keep up with
// control messages is disconnected (it reconnects and resyncs).
func (c *client) enqueue(b []byte) {
	select {
	case c.send <- b:
	case <-c.done:
	default:
		c.stop()
	}
}

func (h *hub) readLoop(c *client) {
	c.conn.SetReadDeadline(time.Now().Add(pongWait))
	c.conn.SetPongHandler(func(string) error { return c.conn.SetReadDeadline(time.Now().Add(pongWait)) })
	for {
		typ, data, err := c.conn.ReadMessage()
		if err != nil {
			return
		}
		c.conn.SetReadDeadline(time.Now().Add(pongWait))
		if typ != websocket.TextMessage {
			continue
		}
		var m wsMsg
		if err := json.Unmarshal(data, &m); err != nil {
			c.enqueue(mustJSON(wsMsg{T: "error", Message: "malformed message: " + err.Error()}))
			continue
		}
		switch m.T {
		case "ping":
			c.enqueue(mustJSON(wsMsg{T: "pong", Seq: m.Seq, Data: m.Data}))
		case "nav":
			if c.readOnly {
				continue // read-only viewers cannot drive the browser
			}
			h.log.Debug().Str("action", m.Action).Msg("navigation request")
		default:
			c.enqueue(mustJSON(wsMsg{T: "error", Message: "unknown message type " + m.T}))
		}
	}
}

func (h *hub) writeLoop(c *client) {
	ping := time.NewTicker(pingEvery)
	defer ping.Stop()
	for {
		select {
		case b := <-c.send:
			c.conn.SetWriteDeadline(time.Now().Add(writeWait))
			if err := c.conn.WriteMessage(websocket.TextMessage, b); err != nil {
				c.stop()
				c.conn.Close() // unblocks the reader
				return
			}
		case <-ping.C:
			c.conn.SetWriteDeadline(time.Now().Add(writeWait))
			if err := c.conn.WriteMessage(websocket.PingMessage, nil); err != nil {
				c.stop()
				c.conn.Close()
				return
			}
		case <-c.done:
			// Flush what is queued (e.g. the "closed" notice), then close.
			for {
				select {
				case b := <-c.send:
					c.conn.SetWriteDeadline(time.Now().Add(writeWait))
					if c.conn.WriteMessage(websocket.TextMessage, b) != nil {
						c.conn.Close()
						return
					}
				default:
					c.conn.SetWriteDeadline(time.Now().Add(writeWait))
					_ = c.conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
					c.conn.Close()
					return
				}
			}
		}
	}
}

// shutdown tells every client the browser is gone and disconnects them.
func (h *hub) shutdown(reason string) {
	h.mu.Lock()
	h.closed, h.reason = true, reason
	cs := make([]*client, 0, len(h.clients))
	for c := range h.clients {
		cs = append(cs, c)
	}
	h.mu.Unlock()
	msg := mustJSON(wsMsg{T: "closed", Reason: "This browser was closed: " + reason + ".", Reload: true})
	for _, c := range cs {
		c.enqueue(msg)
		c.stop()
	}
}

func (h *hub) writeClosed(conn *websocket.Conn, reason string) {
	conn.SetWriteDeadline(time.Now().Add(writeWait))
	_ = conn.WriteMessage(websocket.TextMessage, mustJSON(wsMsg{T: "closed", Reason: "This browser was closed: " + reason + ".", Reload: true}))
	_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	conn.Close()
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own message structs are marshalled
	}
	return b
}
