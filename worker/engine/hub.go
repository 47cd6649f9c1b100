package engine

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/grade"
)

// Client engine protocol: text messages are JSON control messages, one Go
// type each (enginemsg.go); binary messages (server->client) are screen
// frames: a 4-byte big-endian header length, a JSON header
// {seq,w,h,dw,dh,ot,sx,sy,ts} and the JPEG.
const (
	maxClientMessage = 64 << 10
	writeWait        = 10 * time.Second
	pongWait         = 60 * time.Second
	pingEvery        = pongWait * 9 / 10
	sendQueue        = 64
	// castRetry is the pause before a screencast that failed on a live
	// page is started again; it doubles with each failure in a row, up to
	// castRetryMax (castBackoff), and a frame resets it.
	castRetry    = 500 * time.Millisecond
	castRetryMax = 8 * time.Second
)

// Hub is the set of client engines connected to one virtual browser. It
// runs the browser's screencast while at least one client is connected and
// fans frames out: each client has a one-frame slot, and a newer frame
// replaces an unsent one (latest frame wins), so a slow client never slows
// the browser or the other clients.
type Hub struct {
	cfg  Config
	b    browser.Browser
	host Host
	log  zerolog.Logger

	mu      sync.Mutex
	clients map[*client]struct{}
	closed  bool
	reason  string
	reload  string
	// moved: the hub ended because the instance moved (MoveAway); a client
	// that joins after that is sent on too, not told the browser closed.
	moved    bool
	castStop context.CancelFunc // running screencast
	settle   hubSettle          // the check for a missed scroll (settle.go)
	castDone chan struct{}
	// castFails counts the screencast's failures since its last frame.
	castFails atomic.Int32
	page      browser.Page
	// last is the newest encoded frame: a client that joins a screen that
	// is not repainting gets it at once.
	last *frameMsg

	// Idle release: with no client for idle.d, the hub closes
	// itself (under mu, so a client joining at that moment is either
	// served, which cancels the release, or told the browser was
	// released) and calls onIdle.
	idle       countdown
	idleReason string
	idleReload string
	onIdle     func()
	idleBusy   func() bool

	// rest is the resting state (rest.go).
	rest hubRest
	// pre ends a screencast started for a client about to connect
	// (precast) if none did.
	pre countdown

	// grade sizes the frames (nil = full size); the input's paint time
	// gives it an input→frame latency with the next frame.
	grade *grade.Governor
	// input takes the clients' input to the browser (input.go); dialogs
	// shows them the page's dialogs and takes their answers (dialog.go).
	input     *hubInput
	dialogs   hubDialogs
	gestures  *gestures              // whose input came last (gesture.go)
	clipboard hubClipboard           // the page's copies to their viewer (clipboard.go)
	editable  hubEditable            // where the page's focus is (clipboard.go)
	takenBy   atomic.Pointer[string] // who drives an automation session's browser (takeover.go)
	files     *Files                 // pickers, uploads, downloads (files.go)
	// link grades the frames to the viewers' links (grade.go); mu guards
	// it.
	link linkGrade
	// refreshes asks the screencast to take a grade decided between frames
	// (browser.ScreencastOptions.Refresh); 1-buffered.
	refreshes chan struct{}
	// tiles diffs the frames for the engines that compose tiles (tiles.go;
	// nil = Config.Tiles off).
	tiles *hubTiles

	// onPage is told of the browser's page changes (nil = none).
	onPage func(browser.Page)

	frames *Counters // the worker's totals
	// admit applies the socket quotas (nil = none).
	admit func(addr string, open int) (release func(), reason string)
}

type client struct {
	conn     *websocket.Conn
	send     chan []byte // control messages, in order
	frame    atomic.Pointer[frameMsg]
	frameSig chan struct{} // 1-buffered: "a frame is waiting"
	pace     pacer
	done     chan struct{}
	once     sync.Once
	user     string
	// sessions are the ids of the login and dashboard sessions the socket
	// was opened with: ending one closes it.
	sessions []string
	// access is the user's current access to the browser; readOnly
	// follows it, as the owner may change it while the client is
	// connected (Hub.Recheck).
	access   func() Access
	readOnly atomic.Bool
	owner    bool
	// unquota gives back the client's place in the socket quotas.
	unquota func()
	log     zerolog.Logger
	// tiles: the engine composes tile updates (tiles.go); sentSeq is the
	// last frame written to it (0 = none, or a whole frame is due).
	tiles   atomic.Bool
	sentSeq atomic.Uint64
	tileSrc *hubTiles // the hub's (nil: Config.Tiles off)
	tier    viewerTier
}

// NewHub makes the hub of cfg.Browser; Watch starts following it.
func NewHub(cfg Config) *Hub {
	h := &Hub{cfg: cfg, b: cfg.Browser, host: cfg.Host, grade: cfg.Grade, admit: cfg.Admit, onPage: cfg.OnPage, frames: cfg.Counters,
		clients: map[*client]struct{}{}, rest: hubRest{callMu: make(chan struct{}, 1)},
		refreshes: make(chan struct{}, 1),
		log:       cfg.Log.With().Str("browser", cfg.ID).Str("instance", cfg.Instance).Logger()}
	if h.host == nil {
		h.host = noHost{}
	}
	if h.frames == nil {
		h.frames = &Counters{}
	}
	h.link.frames, h.link.log = h.frames, h.log
	clk := cfg.Clock
	if clk == nil {
		clk = clock.Real
	}
	h.gestures = &gestures{clk: clk, on: cfg.OnGesture}
	h.clipboard = hubClipboard{b: h.b, g: h.gestures, log: h.log}
	h.editable = hubEditable{b: h.b, writers: h.toWriters}
	h.files = &Files{cfg: cfg.Files, b: h.b, g: h.gestures, clk: clk, log: h.log, writers: h.toWriters}
	h.input = &hubInput{b: h.b, host: h.host, frames: h.frames, log: h.log, closed: h.Closed, gesture: h.gestures.note,
		scrolled: func() { noteScroll(h) }}
	h.dialogs = hubDialogs{b: h.b, log: h.log, broadcast: h.broadcast}
	h.page = h.b.Page()
	if cfg.Tiles {
		h.tiles = newHubTiles(0)
		h.tiles.rested = func(seq uint64) { repairTiles(h, seq) }
		h.tiles.sharpen = func(seq uint64) { sharpenTiers(h, seq) }
	}
	return h
}

// Watch follows the browser's page changes and its end (onEnd gets the
// browser's error). It is started once the hub is attached to its browser.
func (h *Hub) Watch(onEnd func(err error)) {
	stop := h.b.OnPageChange(func(p browser.Page) {
		h.mu.Lock()
		h.page = p
		h.mu.Unlock()
		h.broadcast(encode(pageMsg{URL: p.URL, Title: p.Title}))
		if h.onPage != nil {
			h.onPage(p)
		}
	})
	stopDialogs := h.dialogs.watch()
	stopCopies := h.clipboard.watch()
	stopFocus := h.editable.watch()
	stopFiles := h.files.watch()
	go func() {
		select {
		case <-h.b.Done():
			stop()
			stopDialogs()
			stopCopies()
			stopFocus()
			stopFiles(false)
			onEnd(h.b.Err())
		case <-h.cfg.Released: // back to its pool: the browser lives on
			stop()
			stopDialogs()
			stopCopies()
			stopFocus()
			stopFiles(true)
		}
	}()
}

// StartIdle turns idle release on (idle > 0) and starts the countdown:
// a browser nobody ever connected to is released too. The hub then closes
// itself, telling late clients reason and reload, and calls onIdle. While
// busy (if set) says the browser is used otherwise (an automation client
// drives it), the countdown starts over instead.
func (h *Hub) StartIdle(idle time.Duration, clk clock.Clock, reason, reload string, onIdle func(), busy func() bool) {
	if idle <= 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.idle.set(idle, clk)
	h.idleReason, h.idleReload, h.onIdle, h.idleBusy = reason, reload, onIdle, busy
	if len(h.clients) == 0 && !h.closed {
		h.idle.arm(h.idleFired)
	}
}

// armCountdownsLocked starts the idle and rest countdowns: the last client
// left, or none has come yet.
func (h *Hub) armCountdownsLocked() {
	if h.closed {
		return
	}
	h.idle.arm(h.idleFired)
	h.rest.cd.arm(h.restFired)
}

// disarmCountdownsLocked stops them: a client joined, or the hub closed.
func (h *Hub) disarmCountdownsLocked() {
	h.idle.disarm()
	h.rest.cd.disarm()
	h.pre.disarm()
}

// Precast. The screencast's first frame takes a
// while after it starts (40 ms on a quiet machine, 150 on a busy one); a
// screencast started when the client engine's page is served has its
// frame ready when the engine's socket opens, a page load later. If no
// client comes within the window, the screencast stops again.

// SetPrecast turns precasting on with the given window (0 = off).
func (h *Hub) SetPrecast(window time.Duration, clk clock.Clock) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pre.set(window, clk)
}

// Precast wakes a resting page and starts the screencast for a client
// about to connect. It blocks for the wake (bounded by ctx): callers run
// it beside the page they serve.
func (h *Hub) Precast(ctx context.Context) {
	h.Wake(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.pre.on() || h.closed || len(h.clients) > 0 {
		return
	}
	h.startCastLocked()
	h.pre.arm(h.precastEnded)
}

// precastEnded stops a precast screencast nobody came to watch.
func (h *Hub) precastEnded(gen uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.pre.current(gen) || len(h.clients) > 0 {
		return
	}
	h.stopCastLocked()
}

// idleFired releases the browser if nobody joined since the countdown
// started.
func (h *Hub) idleFired(gen uint64) {
	h.mu.Lock()
	if !h.idle.current(gen) || h.closed || len(h.clients) > 0 {
		h.mu.Unlock()
		return
	}
	if h.idleBusy != nil && h.idleBusy() {
		h.idle.arm(h.idleFired) // used without a viewer: not idle
		h.mu.Unlock()
		return
	}
	h.closed, h.reason, h.reload = true, h.idleReason, h.idleReload
	h.rest.cd.disarm()
	h.stopCastLocked()
	done, idle, onIdle := h.castDone, h.idle.d, h.onIdle
	h.mu.Unlock()
	if done != nil {
		<-done // the screencast is off the browser before it goes back
	}
	h.log.Debug().Dur("idle", idle).Msg("no client for the idle timeout: releasing")
	onIdle()
}

// Count is the number of clients connected.
func (h *Hub) Count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.clients)
}

// upgrader upgrades a socket opened at the engine page's own origin.
var upgrader = websocket.Upgrader{
	ReadBufferSize:  4096,
	WriteBufferSize: 64 << 10,
	// The default CheckOrigin (same host) applies: proxies keep Host.
}

// ticketUpgrader upgrades a ticketed socket (ticket.go): its page was
// served at another origin, which the ticket names and serveSocket checked
// against Origin; the answer names the engine's protocol, as a browser
// requires of a handshake that offered some.
var ticketUpgrader = func() websocket.Upgrader {
	u := upgrader
	u.Subprotocols = []string{SocketProtocol}
	u.CheckOrigin = func(*http.Request) bool { return true }
	return u
}()

// Upgrader is the upgrader of a client engine's socket: ticketed, one
// whose ticket the caller checked (its Origin included).
func Upgrader(ticketed bool) *websocket.Upgrader {
	if ticketed {
		return &ticketUpgrader
	}
	return &upgrader
}

// ServeClosed upgrades r with up and tells the client engine its browser
// is gone for good, with reload, the address that gives a new one ("" =
// none): an engine cannot read an upgrade's status, and one told so does
// not reconnect.
func ServeClosed(w http.ResponseWriter, r *http.Request, up *websocket.Upgrader, reason, reload string) {
	if conn, err := up.Upgrade(w, r, nil); err == nil {
		writeClosed(conn, reason, reload)
	}
}

// revokedReason is what a client whose access was withdrawn is told.
const revokedReason = "The owner no longer shares this browser with you."

// Serve upgrades r with up and runs the client cl until it disconnects.
// The caller checked cl's access is not AccessNone.
func (h *Hub) Serve(w http.ResponseWriter, r *http.Request, up *websocket.Upgrader, cl Client) {
	user, addr, linkKbps := cl.User, cl.Addr, cl.LinkKbps
	conn, err := up.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrade already answered with an error status
	}
	conn.SetReadLimit(maxClientMessage)
	c := &client{conn: conn, send: make(chan []byte, sendQueue), frameSig: make(chan struct{}, 1),
		done: make(chan struct{}), user: user, sessions: cl.Sessions, access: cl.Access,
		log: h.log.With().Str("request_id", r.Header.Get("X-Request-Id")).Str("user", user).Logger()}
	c.readOnly.Store(true)
	c.tileSrc = h.tiles
	h.mu.Lock()
	if h.closed {
		reason, reload, moved := h.reason, h.reload, h.moved
		h.mu.Unlock()
		if moved {
			// A client that reached the old copy late (a proxy's stale
			// route): on to the new one, as its peers were.
			endWith(conn, movedMsg{Reason: reason}, websocket.CloseNormalClosure, "")
			return
		}
		writeClosed(conn, reason, reload)
		return
	}
	if h.admit != nil {
		// Under h.mu: concurrent joins cannot overshoot the per-browser limit.
		release, refused := h.admit(addr, len(h.clients))
		if refused != "" {
			h.mu.Unlock()
			h.log.Info().Str("request_id", r.Header.Get("X-Request-Id")).Str("user", user).Str("client_ip", addr).
				Str("reason", refused).Msg("socket refused: quota")
			writeRefused(conn, refused)
			return
		}
		c.unquota = release
	}
	h.clients[c] = struct{}{}
	h.disarmCountdownsLocked()
	h.mu.Unlock()
	// The access is read once the client is in the set: a grant changed
	// before this is seen here, one changed after it reaches the client
	// through Recheck. Readers watch; reader-writers and the owner drive;
	// only the owner's window sets the viewport.
	cur := cl.Access()
	if cur == AccessNone {
		h.leave(c)
		writeClosed(conn, revokedReason, "")
		return
	}
	readOnly := cur < AccessWrite
	c.owner = cur == AccessOwner
	c.readOnly.Store(readOnly)
	h.Wake(r.Context()) // a resting page paints nothing
	h.mu.Lock()
	page := h.page
	// A last frame too large for the client's link is not sent: a fresh
	// one at the hinted step comes instead, from the screencast's refresh
	// (or, if it only starts now, its start; the refresh is then a no-op).
	stale := h.link.hint(linkKbps, h.clients, h.last)
	hadLast := h.last != nil
	if h.last != nil && !stale {
		c.frame.Store(h.last)
		c.frameSig <- struct{}{}
	}
	h.startCastLocked()
	h.mu.Unlock()
	if stale {
		h.refresh()
	}
	// last_frame: the client got a frame at once (false: it waits for the
	// screencast's next, the first-frame latency's usual suspect).
	h.log.Debug().Str("request_id", r.Header.Get("X-Request-Id")).Bool("read_only", readOnly).
		Bool("last_frame", hadLast && !stale).Msg("client connected")

	c.enqueue(encode(helloMsg{Browser: h.cfg.ID, Instance: h.cfg.Instance, App: h.cfg.App,
		Worker: h.cfg.Worker, Page: &page, ReadOnly: readOnly, NoFrames: h.cfg.NoFrames}))
	if h.host.InputHeld() {
		c.enqueue(holdJSON) // a migration is under way: keep the input for the new copy
	}
	h.dialogs.sendOpen(c)
	if !readOnly {
		h.editable.sendState(c)
	}
	if by := h.takenBy.Load(); by != nil && *by != "" {
		c.enqueue(encode(takeoverMsg{User: *by}))
	}

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); c.writeLoop(h.frames) }()
	h.readLoop(c)
	c.stop()
	wg.Wait()
	conn.Close()
	h.leave(c)
}

// leave takes a client out of the set; the last one stops the screencast.
func (h *Hub) leave(c *client) {
	if c.unquota != nil {
		c.unquota()
	}
	dropCaps(h, c)
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.clients, c)
	h.gestures.forget(c)
	if len(h.clients) == 0 {
		h.link.reset()
		h.stopCastLocked()
		h.armCountdownsLocked()
	}
}

// startCastLocked starts the screencast if it is not running.
func (h *Hub) startCastLocked() {
	if h.castStop != nil || h.closed {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	prev := h.castDone
	h.castStop, h.castDone = cancel, done
	go func() {
		defer close(done)
		if prev != nil {
			<-prev // one screencast per browser: let the previous one stop
		}
		opts := browser.ScreencastOptions{Grade: h.frameGrade, Refresh: h.refreshes}
		if h.grade != nil {
			opts.Sharpen = h.grade.Sharpen()
		}
		err := h.b.Screencast(ctx, opts, h.fanOut)
		if err == nil || ctx.Err() != nil || errors.Is(err, browser.ErrClosed) || errors.Is(err, browser.ErrCrashed) {
			return // stopped, or the browser is gone (its watcher ends the hub)
		}
		// The page is still there: its viewers would see no frame again.
		fails := int(h.castFails.Add(1))
		retry := castBackoff(fails)
		h.log.Warn().Err(err).Int("failures", fails).Dur("retry_in", retry).Msg("screencast stopped; starting it again")
		h.mu.Lock()
		if h.castDone == done {
			h.castStop = nil
		}
		h.mu.Unlock()
		cancel()
		time.AfterFunc(retry, func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if len(h.clients) > 0 {
				h.startCastLocked()
			}
		})
	}()
}

// castBackoff is the pause before the screencast is started again after
// its fails-th failure in a row: a page whose screencast keeps failing is
// not hammered, nor its log flooded.
func castBackoff(fails int) time.Duration {
	d := castRetry
	for i := 1; i < fails && d < castRetryMax; i++ {
		d *= 2
	}
	return min(d, castRetryMax)
}

// refreshFrame answers a client engine that got no frame for a while
// ({"t":"refresh"}, after connecting or while its input goes unanswered):
// the last frame again, or, with none yet, a screencast that starts and so
// paints one.
func (h *Hub) refreshFrame(c *client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	if h.last != nil {
		c.sentSeq.Store(0)                  // whole: the engine may have lost its screen
		c.frame.CompareAndSwap(nil, h.last) // a newer one waiting goes instead
		c.signalFrame()
		return
	}
	h.startCastLocked()
}

// refresh has the screencast ask for its grade now, not at the next frame.
func (h *Hub) refresh() {
	select {
	case h.refreshes <- struct{}{}:
	default:
	}
}

func (h *Hub) stopCastLocked() {
	if h.castStop != nil {
		h.castStop()
		h.castStop = nil
	}
}

// fanOut is the screencast sink: encode once, offer to every client.
func (h *Hub) fanOut(f browser.Frame) {
	h.frames.produced.Add(1)
	h.castFails.Store(0)
	if at := h.input.paintAt.Swap(0); at != 0 && h.grade != nil {
		// An input older than a second painted nothing; this frame is not
		// its answer.
		if d := time.Since(time.Unix(0, at)); d < time.Second {
			h.grade.Observe(d)
		}
	}
	h.host.Touched() // the page changed: snapshotted within the interval
	msg := &frameMsg{seq: f.Seq, b: encodeFrame(f), hdr: headerOf(f)}
	addTiles(h.tiles, f, msg)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.link.hinted && float64(f.Width) > f.DeviceWidth*h.input.deviceScale()*linkSteps[h.link.step].scale+2 && h.link.hintDrops < maxHintDrops {
		// Graded before a joining viewer's link hint, and too large for
		// it: the screencast's restart sends the frame at the new size.
		h.link.hintDrops++
		return
	}
	h.last = msg
	noteScroll(h)
	for c := range h.clients {
		if old := c.frame.Swap(msg); old != nil {
			h.frames.dropped.Add(1)
		}
		c.signalFrame()
	}
}

// frameMsg is an encoded frame and its sequence number; delta, if set,
// is the frame as a tile update from frame base (tiles.go).
type frameMsg struct {
	seq   uint64
	b     []byte
	delta []byte
	base  uint64
	hdr   frameHeader // a union of updates needs it, and a missed scroll (settle.go)
	tiers tierCache   // forms requantized for slow viewers (tier.go)
	sharp bool        // never requantized: a page at rest (sharpenTiers)
}

type frameHeader struct {
	Seq uint64  `json:"seq"`
	W   int     `json:"w"`
	H   int     `json:"h"`
	DW  float64 `json:"dw"`
	DH  float64 `json:"dh"`
	OT  float64 `json:"ot"`
	SX  float64 `json:"sx"`
	SY  float64 `json:"sy"`
	TS  int64   `json:"ts"` // ms since epoch
}

func encodeFrame(f browser.Frame) []byte { return packFrame(headerOf(f), f.Data) }

func (c *client) stop() {
	c.once.Do(func() {
		close(c.done)
		c.pace.stop()
	})
}

// signalFrame wakes the writer for the frame in the slot.
func (c *client) signalFrame() {
	select {
	case c.frameSig <- struct{}{}:
	default:
	}
}

// end sends msg (a "closed" notice), then disconnects the client.
func (c *client) end(msg []byte) {
	c.enqueue(msg)
	c.stop()
}

// enqueue never blocks the sender: a client that cannot keep up with
// control messages is disconnected (it reconnects and resyncs).
func (c *client) enqueue(b []byte) {
	select {
	case c.send <- b:
	case <-c.done:
	default:
		c.log.Warn().Int("queued", sendQueue).Msg("client not keeping up with control messages: disconnected")
		c.stop()
	}
}

func (h *Hub) broadcast(b []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.clients {
		c.enqueue(b)
	}
}

// toWriters sends b to the viewers who may drive the browser.
func (h *Hub) toWriters(b []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.clients {
		if !c.readOnly.Load() {
			c.enqueue(b)
		}
	}
}

// Files is the browser's file door: uploads, drops and downloads.
func (h *Hub) Files() *Files { return h.files }

func (h *Hub) readLoop(c *client) {
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
		var m clientEnvelope
		if err := json.Unmarshal(data, &m); err != nil {
			c.enqueue(encode(errorMsg{Message: "malformed message: " + err.Error()}))
			continue
		}
		if take, ok := clientHandlers[m.T]; ok {
			take(h, c, &m, data)
		} else {
			c.enqueue(encode(errorMsg{Message: "unknown message type " + string(m.T)}))
		}
	}
}

// clientHandlers take the client messages, by kind: the kinds the worker
// understands are this table's keys (the contract test compares them with
// what engine.js sends). raw is the message as it came.
var clientHandlers = map[msgKind]func(h *Hub, c *client, m *clientEnvelope, raw []byte){
	kindPing: func(h *Hub, c *client, m *clientEnvelope, _ []byte) {
		c.enqueue(encode(pongMsg(m.ping())))
	},
	kindAck: func(h *Hub, c *client, m *clientEnvelope, _ []byte) {
		a := m.ack()
		h.frames.acks.Add(1)
		c.pace.acked(uint64(a.Seq))
		decideTier(h, c)
		h.link.acks.Add(1)
		if h.hintPending() {
			h.refresh() // the hinted step is decided by this ack's frame
		}
		c.signalFrame() // a held frame may go now
	},
	kindInput: func(h *Hub, c *client, m *clientEnvelope, raw []byte) {
		h.input.take(c, m.input(), raw) // a migration may hold it
	},
	kindRefresh: func(h *Hub, c *client, _ *clientEnvelope, _ []byte) {
		h.refreshFrame(c)
	},
	kindAnswer: func(h *Hub, c *client, m *clientEnvelope, _ []byte) {
		h.dialogs.answer(c, m.answer())
	},
	kindHandBack: func(h *Hub, c *client, _ *clientEnvelope, _ []byte) {
		handBack(h, c)
	},
	kindCaps: func(h *Hub, c *client, m *clientEnvelope, _ []byte) {
		takeCaps(h, c, m)
	},
}

// writeLoop writes the client's control messages, its frame slot (paced
// by its acks) and pings, until it stops; frames counts what it sends and
// holds.
func (c *client) writeLoop(frames *Counters) {
	ping := time.NewTicker(pingEvery)
	defer ping.Stop()
	write := func(typ int, b []byte) bool {
		c.conn.SetWriteDeadline(time.Now().Add(writeWait))
		if err := c.conn.WriteMessage(typ, b); err != nil {
			c.stop()
			c.conn.Close() // unblocks the reader
			return false
		}
		return true
	}
	for {
		// Control messages first: they are small and ordered.
		select {
		case b := <-c.send:
			if !write(websocket.TextMessage, b) {
				return
			}
			continue
		default:
		}
		select {
		case b := <-c.send:
			if !write(websocket.TextMessage, b) {
				return
			}
		case <-c.frameSig:
			if c.frame.Load() == nil {
				continue
			}
			if !c.pace.mayWrite(c.signalFrame) {
				frames.held.Add(1) // stays in the slot; the next ack signals
				continue
			}
			if f := c.frame.Swap(nil); f != nil {
				c.pace.wrote(f.seq) // before the write: its ack may come back before the write returns
				if !write(websocket.BinaryMessage, frameBytes(c, f)) {
					return
				}
				frames.sent.Add(1)
			}
		case <-ping.C:
			if !write(websocket.PingMessage, nil) {
				return
			}
		case <-c.done:
			// Flush what is queued (e.g. the "closed" notice), then close.
			for {
				select {
				case b := <-c.send:
					if !write(websocket.TextMessage, b) {
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

// Recheck applies changed grants to connected clients. A client whose
// access is gone is told and disconnected; one whose access changed
// between reading and writing is told and from then on drives or only
// watches. Access is read under the instance's and browser's locks, so not
// under h.mu.
func (h *Hub) Recheck() {
	for _, c := range h.clientsOf("") {
		access := c.access()
		if access == AccessNone {
			h.log.Info().Str("user", c.user).Msg("access revoked: client disconnected")
			c.end(encode(closedMsg{Reason: revokedReason}))
			continue
		}
		ro := access < AccessWrite
		if c.readOnly.Swap(ro) != ro {
			c.enqueue(encode(roleMsg{ReadOnly: ro}))
		}
	}
}

// clientsOf is a snapshot of user's clients ("": every client).
func (h *Hub) clientsOf(user string) []*client {
	h.mu.Lock()
	defer h.mu.Unlock()
	cs := make([]*client, 0, len(h.clients))
	for c := range h.clients {
		if user == "" || c.user == user {
			cs = append(cs, c)
		}
	}
	return cs
}

// Disconnect tells user's clients why they are disconnected and closes
// them; it returns how many there were.
func (h *Hub) Disconnect(user, reason, reload string) int {
	cs := h.clientsOf(user)
	msg := encode(closedMsg{Reason: reason, Reload: reload})
	for _, c := range cs {
		c.end(msg)
	}
	return len(cs)
}

// DisconnectSession closes the clients opened with session id sid, telling
// them why; it returns how many there were.
func (h *Hub) DisconnectSession(sid, reason, reload string) int {
	var cs []*client
	for _, c := range h.clientsOf("") {
		if slices.Contains(c.sessions, sid) {
			cs = append(cs, c)
		}
	}
	msg := encode(closedMsg{Reason: reason, Reload: reload})
	for _, c := range cs {
		c.end(msg)
	}
	return len(cs)
}

// Shutdown tells every client the browser is gone and disconnects them.
// reload is the URL that gives the user a new browser ("" = none).
func (h *Hub) Shutdown(reason, reload string) {
	h.end(encode(closedMsg{Reason: reason, Reload: reload}), reason, reload, false)
}

// MoveAway tells every client that the instance now lives on another
// worker (its Browser URL stays the same) and disconnects them: the client
// engine reconnects at once and lands there.
func (h *Hub) MoveAway(reason string) {
	h.end(encode(movedMsg{Reason: reason}), reason, "", true)
}

// end closes the hub, sending msg to every client (moved: msg says the
// instance moved).
func (h *Hub) end(msg []byte, reason, reload string, moved bool) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed, h.reason, h.reload, h.moved = true, reason, reload, moved
	h.disarmCountdownsLocked()
	h.stopCastLocked()
	done := h.castDone
	cs := make([]*client, 0, len(h.clients))
	for c := range h.clients {
		cs = append(cs, c)
	}
	h.mu.Unlock()
	h.input.stop() // after mu: the input's lock comes first (hubInput.closed)
	for _, c := range cs {
		c.end(msg)
	}
	if done != nil {
		<-done
	}
}

func writeClosed(conn *websocket.Conn, reason, reload string) {
	endWith(conn, closedMsg{Reason: reason, Reload: reload}, websocket.CloseNormalClosure, "")
}

// writeRefused tells a client it was not admitted (a quota) and closes with
// "policy violation", so the client engine does not reconnect in a loop.
func writeRefused(conn *websocket.Conn, reason string) {
	endWith(conn, closedMsg{Reason: reason}, websocket.ClosePolicyViolation, "quota")
}

// endWith sends a last message and a close frame, then closes conn.
func endWith(conn *websocket.Conn, m serverMsg, code int, text string) {
	conn.SetWriteDeadline(time.Now().Add(writeWait))
	_ = conn.WriteMessage(websocket.TextMessage, encode(m))
	_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(code, text))
	conn.Close()
}
