// Package cdpgate is the confinement gate of the automation endpoint: it
// sits between an automation client's WebSocket (Playwright's
// connectOverCDP, Puppeteer's connect, chromedp) and a pooled Chromium
// whose process also hosts other users' browser contexts, and gives the
// client a browser of its own: it sees, attaches to, creates in and
// affects only its own contexts, and cannot call browser-wide methods.
//
// Everything is denied unless the one table in rules.go allows it
// (docs/automation.md, "Confinement", documents it method by method).
// The gate opens its own upstream connection per session, remaps command
// ids, rewrites the few commands that name a browser context, filters
// results and events by browser context, and detaches (and resumes) any
// other user's target that an auto-attach reaches.
package cdpgate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"
)

// DefaultMaxMessage is Config.MaxMessage's default.
const DefaultMaxMessage = 16 << 20

const (
	dialTimeout  = 10 * time.Second
	writeTimeout = 30 * time.Second // a client that stops reading is dropped after it
	closeWait    = 2 * time.Second  // for the client's answer to our close frame
	cleanupWait  = 10 * time.Second // disposing the client's contexts at the end
)

// Config configures one gated session.
type Config struct {
	// Upstream is Chromium's browser WebSocket URL
	// (ws://127.0.0.1:port/devtools/browser/<id>). The gate opens its own
	// connection to it per session.
	Upstream string
	// Context is the session's primary browser context, leased by the
	// worker: commands that name no context are put in it. The gate
	// never disposes it, nor closes what the client left in it.
	Context string
	// Page, if set, is the session's own page in Context: it cannot be
	// closed (Target.closeTarget is refused for it).
	Page string
	// MaxContexts is how many more contexts the client may have at once
	// through Target.createBrowserContext (0: none).
	MaxContexts int
	// ContextParams, if set, sees (and may change) the params of every
	// Target.createBrowserContext the gate forwards, e.g. to set the
	// worker's egress proxy (proxyServer). Client-supplied proxyServer and
	// proxyBypassList are refused before it is called.
	ContextParams func(params map[string]any)
	// OnContext, if set, is told when a client context was created
	// (created true: an error disposes it again and fails the client's
	// command, so a context never runs without the worker's policy) or
	// disposed (created false, also at the end of the session; the error
	// is only logged).
	OnContext func(ctx context.Context, id string, created bool) error
	// DownloadPath is where the client's downloads in Context go: it
	// replaces the downloadPath of Browser.setDownloadBehavior (a path on
	// the client's machine, or anywhere on the worker's disk), and the
	// behavior becomes "allowAndName" (files named by their guid). Empty,
	// and for the client's other contexts: downloads are denied ("allow"
	// and "allowAndName" become "deny").
	DownloadPath string
	// MaxMessage bounds a client message in bytes (default
	// DefaultMaxMessage); a bigger one closes the client with 1009.
	MaxMessage int64
	// Activity, if set, is called for every client command (the worker's
	// idle timeout); it must be cheap.
	Activity func()
	// Notices, if set, are events of the worker's own sent to the client
	// as CDP events (a person taking over the browser, handing it back).
	Notices <-chan Notice
	// Log receives the gate's structured logs.
	Log zerolog.Logger
}

// Notice is an event the gate sends its client: {"method": Method,
// "params": Params}, at browser level (no sessionId) and in each of the
// client's browser sessions (Target.attachToBrowserTarget), where the
// client libraries surface it.
type Notice struct {
	Method string
	Params any
}

// Reason is why a session ended.
type Reason int

const (
	// ReasonClientGone: the client closed the connection or it failed.
	ReasonClientGone Reason = iota + 1
	// ReasonClientError: the client broke the protocol (a frame that is
	// not a command: 1007; too big: 1009).
	ReasonClientError
	// ReasonBrowserClose: the client called Browser.close.
	ReasonBrowserClose
	// ReasonContextDone: Serve's context ended; the client got a close
	// frame (1001) with its cause as the reason.
	ReasonContextDone
	// ReasonUpstreamLost: the connection to Chromium failed or closed.
	ReasonUpstreamLost
)

func (r Reason) String() string {
	switch r {
	case ReasonClientGone:
		return "client gone"
	case ReasonClientError:
		return "client protocol error"
	case ReasonBrowserClose:
		return "Browser.close"
	case ReasonContextDone:
		return "context done"
	case ReasonUpstreamLost:
		return "upstream lost"
	}
	return fmt.Sprintf("Reason(%d)", int(r))
}

// Result is how a session went.
type Result struct {
	Reason    Reason
	Forwarded int64 // client commands relayed to Chromium (possibly rewritten); not those the gate answers itself
	Refused   int64 // client commands the gate refused with an error
}

// errBrowserClose is a check's way to end the session (Browser.close).
var errBrowserClose = errors.New("Browser.close")

// pending is an upstream command waiting for its reply: the client's
// (clientID set) or the gate's own (reply set; neither: discarded).
type pending struct {
	clientID string
	session  string
	after    func([]byte) ([]byte, error)
	reply    chan *upMessage
}

type gate struct {
	cfg    Config
	log    zerolog.Logger
	client *websocket.Conn
	up     *websocket.Conn
	own    *owned

	cw, uw *frameWriter // the client's and Chromium's frames
	queue  bool         // client commands wait in uw for the next read from the client (Upgrade)
	nextID atomic.Int64
	cmdBuf []byte // readClient's: the upstream frame of a command
	repBuf []byte // readUpstream's: the client's frame of a reply

	pmu     sync.Mutex
	pending map[int64]*pending

	upDone chan struct{} // the upstream reader ended
	upErr  error         // why; read after upDone

	forwarded, refused int64 // client goroutine only
}

// Serve runs one session: it connects to cfg.Upstream and relays between
// it and client (a server-side connection that Serve owns from now on and
// closes) under the rules, until the client disconnects or calls
// Browser.close, ctx ends or Chromium's connection is lost. Then it
// disposes the contexts the client created and closes its upstream
// connection. The error is nil for an orderly end (client gone,
// Browser.close, ctx done).
func Serve(ctx context.Context, client *websocket.Conn, cfg Config) (Result, error) {
	defer client.Close()
	if cfg.MaxMessage <= 0 {
		cfg.MaxMessage = DefaultMaxMessage
	}
	log := cfg.Log.With().Str("component", "cdpgate").Str("context", cfg.Context).Logger()
	g := &gate{cfg: cfg, log: log, client: client, own: newOwned(cfg.Context),
		pending: map[int64]*pending{}, upDone: make(chan struct{})}
	if cfg.Upstream == "" || cfg.Context == "" {
		g.closeClient(websocket.CloseInternalServerErr, "automation gate not configured")
		return Result{Reason: ReasonUpstreamLost}, errors.New("cdpgate: Config.Upstream and Config.Context are required")
	}
	up, err := dial(ctx, cfg.Upstream, func() {
		if g.cw != nil {
			g.cw.flush()
		}
	})
	if err != nil && ctx.Err() != nil {
		g.closeClient(websocket.CloseGoingAway, truncate(context.Cause(ctx).Error(), 123))
		return Result{Reason: ReasonContextDone}, nil
	}
	if err != nil {
		g.closeClient(websocket.CloseInternalServerErr, "browser unavailable")
		return Result{Reason: ReasonUpstreamLost}, fmt.Errorf("cdpgate: connecting to Chromium: %w", err)
	}
	g.up = up
	g.cw = newFrameWriter(client.NetConn(), false, func() { client.Close() })
	g.uw = newFrameWriter(up.NetConn(), true, func() { up.Close() })
	if hc, ok := client.NetConn().(*hookConn); ok {
		hc.before, g.queue = g.uw.flush, true
	}
	client.SetReadLimit(cfg.MaxMessage)
	log.Debug().Msg("session started")

	// run ends the client's commands in flight (gate calls) when the
	// session ends; it keeps ctx's values for OnContext.
	run, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	go g.readUpstream()
	if cfg.Notices != nil {
		go g.notify(run, cfg.Notices)
	}
	clientDone := make(chan outcome, 1)
	go func() { clientDone <- g.readClient(run) }()

	var out outcome
	select {
	case out = <-clientDone:
		clientDone = nil
	case <-g.upDone:
		out = outcome{ReasonUpstreamLost, fmt.Errorf("cdpgate: Chromium connection lost: %w", g.upErr)}
		g.closeClient(websocket.CloseInternalServerErr, "browser connection lost")
	case <-ctx.Done():
		out = outcome{reason: ReasonContextDone}
		g.closeClient(websocket.CloseGoingAway, truncate(context.Cause(ctx).Error(), 123))
	}
	stop()
	g.uw.flush() // commands read with the last ones (Browser.close's) still go
	if clientDone != nil {
		<-clientDone // the client answered our close frame, or closeWait passed
	} else {
		if out.reason == ReasonBrowserClose {
			g.closeClient(websocket.CloseNormalClosure, "Browser.close")
		}
		g.drainClient()
	}
	client.Close()
	g.cw.close()

	cleanupErr := g.cleanup(ctx)
	up.Close()
	<-g.upDone
	g.uw.close()
	res := Result{Reason: out.reason, Forwarded: g.forwarded, Refused: g.refused}
	log.Debug().Stringer("reason", out.reason).Int64("forwarded", res.Forwarded).Int64("refused", res.Refused).Msg("session ended")
	return res, errors.Join(out.err, cleanupErr)
}

type outcome struct {
	reason Reason
	err    error
}

// dial connects to Chromium; before, if set, is called before each read
// from the connection (flushConn).
func dial(ctx context.Context, url string, before func()) (*websocket.Conn, error) {
	d := websocket.Dialer{HandshakeTimeout: dialTimeout, Proxy: nil}
	if before != nil {
		d.NetDialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return flushConn{Conn: c, before: before}, nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	c, resp, err := d.DialContext(ctx, url, http.Header{})
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	return c, err
}

// readClient handles the client's commands in order until the session
// ends. A command that needs Chromium's answer first (an ownership check,
// a context to create) holds the next ones back, so order is kept.
func (g *gate) readClient(run context.Context) outcome {
	var buf []byte
	for {
		data, err := readFrame(g.client, &buf)
		if err != nil {
			if errors.Is(err, websocket.ErrReadLimit) {
				return outcome{ReasonClientError, fmt.Errorf("cdpgate: client message over %d bytes", g.cfg.MaxMessage)}
			}
			return outcome{reason: ReasonClientGone}
		}
		if run.Err() != nil {
			continue // ending: read only to see the client's close frame
		}
		if g.cfg.Activity != nil {
			g.cfg.Activity()
		}
		c, err := readCommand(data)
		if err != nil {
			g.log.Debug().Err(err).Msg("bad client frame")
			g.closeClient(websocket.CloseInvalidFramePayloadData, truncate("invalid CDP command: "+err.Error(), 123))
			return outcome{ReasonClientError, fmt.Errorf("cdpgate: client sent an invalid command: %w", err)}
		}
		c.reply = c.session
		if g.own.browserSession(c.session) {
			c.session = "" // the gate's browser session: at browser level, under the same rules
		}
		if err := g.handle(run, c); errors.Is(err, errBrowserClose) {
			return outcome{reason: ReasonBrowserClose}
		}
	}
}

// handle decides one command by the rules and forwards it, answers it
// or refuses it.
func (g *gate) handle(run context.Context, c *command) error {
	err := decide(run, g, c)
	var ce *cdpError
	switch {
	case err == nil && c.local != nil:
		g.writeClient(response(c.id, c.reply, c.local, nil))
	case err == nil:
		if err := g.forward(c); err != nil {
			return err
		}
		g.forwarded++
	case errors.Is(err, errBrowserClose):
		g.writeClient(response(c.id, c.reply, nil, nil))
		return err
	case errors.As(err, &ce):
		g.refused++
		g.log.Debug().Str("method", c.method).Str("session", c.session).Str("error", ce.Message).Msg("refused")
		g.writeClient(response(c.id, c.reply, nil, ce))
	default: // the session is ending or Chromium is gone
		g.log.Debug().Err(err).Str("method", c.method).Msg("command dropped")
	}
	return nil
}

// forward sends a client command upstream under a gate id.
func (g *gate) forward(c *command) error {
	id := g.nextID.Add(1)
	g.addPending(id, &pending{clientID: c.id, session: c.reply, after: c.after})
	var err error
	if c.params == nil { // as sent: no check read them
		g.cmdBuf = appendCommand(g.cmdBuf[:0], id, c)
	} else if g.cmdBuf, err = encodeCommand(id, c.method, c.session, c.params); err != nil {
		return err
	}
	if g.queue {
		g.uw.queue(opText, g.cmdBuf)
	} else {
		g.uw.send(opText, g.cmdBuf)
	}
	return nil
}

// call sends the gate's own command and waits for its reply. A CDP error
// in the reply is a *cdpError.
func (g *gate) call(ctx context.Context, session, method string, params any) (json.RawMessage, error) {
	id := g.nextID.Add(1)
	ch := make(chan *upMessage, 1)
	g.addPending(id, &pending{reply: ch})
	defer g.takePending(id)
	if err := g.sendUp(id, method, session, params); err != nil {
		return nil, err
	}
	select {
	case m := <-ch:
		if m.Error != nil {
			return nil, upstreamError(m.Error)
		}
		return m.Result, nil
	case <-g.upDone:
		return nil, errors.New("cdpgate: Chromium connection lost")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// send sends the gate's own command and forgets its reply.
func (g *gate) send(session, method string, params any) {
	id := g.nextID.Add(1)
	g.addPending(id, &pending{})
	if err := g.sendUp(id, method, session, params); err != nil {
		g.log.Debug().Err(err).Str("method", method).Msg("gate command not sent")
	}
}

func (g *gate) addPending(id int64, p *pending) {
	g.pmu.Lock()
	g.pending[id] = p
	g.pmu.Unlock()
}

func (g *gate) takePending(id int64) *pending {
	g.pmu.Lock()
	defer g.pmu.Unlock()
	p := g.pending[id]
	delete(g.pending, id)
	return p
}

func (g *gate) sendUp(id int64, method, session string, params any) error {
	data, err := encodeCommand(id, method, session, params)
	if err != nil {
		return err
	}
	select {
	case <-g.upDone:
		return errors.New("cdpgate: Chromium connection lost")
	default:
	}
	g.uw.send(opText, data)
	return nil
}

// notify sends the worker's notices to the client until run ends.
func (g *gate) notify(run context.Context, notices <-chan Notice) {
	for {
		select {
		case <-run.Done():
			return
		case n := <-notices:
			data, err := json.Marshal(map[string]any{"method": n.Method, "params": n.Params})
			if err != nil {
				g.log.Warn().Err(err).Str("method", n.Method).Msg("notice not sent")
				continue
			}
			g.writeClient(data)
			for _, s := range g.own.browserSessions() {
				g.writeClient(withSession(data, s))
			}
		}
	}
}

// writeClient sends a frame to the client. A failed write (a client that
// stopped reading) closes the connection, which ends the session.
func (g *gate) writeClient(data []byte) {
	g.cw.send(opText, data)
}

// queueClient queues a frame for the client, sent before the upstream
// reader reads again (flushConn).
func (g *gate) queueClient(data []byte) {
	g.cw.queue(opText, data)
}

// closeClient sends a close frame, after the frames queued before it,
// and gives the client closeWait to answer it before its connection is
// closed.
func (g *gate) closeClient(code int, reason string) {
	msg := websocket.FormatCloseMessage(code, reason)
	if g.cw != nil {
		g.cw.sendWithin(opClose, msg, time.Second)
	} else { // before the session started
		g.client.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
	}
	g.client.SetReadDeadline(time.Now().Add(closeWait))
}

// drainClient reads (and drops) until the client's answer to our close
// frame or an error, once the client reader has ended.
func (g *gate) drainClient() {
	g.client.SetReadDeadline(time.Now().Add(closeWait))
	for {
		if _, _, err := g.client.NextReader(); err != nil {
			return
		}
	}
}

// readUpstream relays Chromium's replies and events until its connection
// closes.
func (g *gate) readUpstream() {
	defer close(g.upDone)
	var buf []byte
	for {
		data, err := readFrame(g.up, &buf)
		if err != nil {
			g.upErr = err
			return
		}
		var m upMessage
		if err := scanUp(data, &m); err != nil {
			g.log.Warn().Err(err).Msg("bad frame from Chromium")
			continue
		}
		if m.ID != nil {
			g.onReply(&m)
		} else if g.onEvent(&m) {
			g.queueClient(data)
			if m.SessionID == "" {
				// Commands in the gate's browser sessions run at browser
				// level, so their events arrive there: copy them.
				for _, s := range g.own.browserSessions() {
					g.queueClient(withSession(data, s))
				}
			}
		}
	}
}

func (g *gate) onReply(m *upMessage) {
	p := g.takePending(*m.ID)
	switch {
	case p == nil:
		g.log.Debug().Int64("id", *m.ID).Msg("reply to no command")
		return
	case p.reply != nil:
		p.reply <- m.detach() // the frame's buffer is read into again
		return
	case p.clientID == "":
		return
	}
	var e *cdpError
	result := []byte(m.Result)
	if m.Error != nil {
		e = upstreamError(m.Error)
	} else if p.after != nil {
		var err error
		if result, err = p.after(result); err != nil {
			e = &cdpError{Code: codeServerError, Message: err.Error()}
		}
	}
	g.repBuf = appendResponse(g.repBuf[:0], p.clientID, p.session, result, e)
	g.queueClient(g.repBuf)
}

func upstreamError(raw json.RawMessage) *cdpError {
	e := &cdpError{raw: raw}
	if json.Unmarshal(raw, e) != nil || e.Message == "" {
		e.Message = string(raw)
	}
	return e
}

// cleanup resumes what the client left paused and disposes the contexts
// it created. Targets it created in the primary context stay: the
// worker, which owns that context, decides about them.
func (g *gate) cleanup(ctx context.Context) error {
	select {
	case <-g.upDone:
		// Chromium disposes them itself (disposeOnDetach); tell the worker.
		for _, id := range g.own.createdContexts() {
			g.contextGone(ctx, id)
		}
		return nil
	default:
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupWait)
	defer cancel()
	var errs []error
	for _, s := range g.own.waitingSessions() {
		// A target the client's auto-attach paused: Chromium resumes it
		// when our connection closes (measured), but not on a detach, so
		// do not depend on how the connection ends.
		if _, err := g.call(cctx, s, "Runtime.runIfWaitingForDebugger", nil); err != nil {
			g.log.Debug().Err(err).Str("session", s).Msg("resume at end")
		}
	}
	for _, id := range g.own.createdContexts() {
		if _, err := g.call(cctx, "", "Target.disposeBrowserContext", map[string]any{"browserContextId": id}); err != nil {
			errs = append(errs, fmt.Errorf("cdpgate: disposing context %s: %w", id, err))
		}
		g.contextGone(ctx, id)
	}
	return errors.Join(errs...)
}

// contextGone forgets a client context and tells the worker.
func (g *gate) contextGone(ctx context.Context, id string) {
	g.own.removeContext(id)
	if g.cfg.OnContext == nil {
		return
	}
	if err := g.cfg.OnContext(context.WithoutCancel(ctx), id, false); err != nil {
		g.log.Warn().Err(err).Str("browser_context", id).Msg("OnContext on dispose")
	}
}
