// Package policy enforces virtual browsers' navigation policies
// (browser.Options.Allow) in Chromium: a Hub per Chromium process, and a
// Filter per browser that has a policy. It sees Chromium only through a
// cdp.Session of its browser target, and a browser only through what
// NewFilter is given (Browser).
//
// A browser with a policy has the Fetch domain enabled on every target of its
// browser context: the page, its popups (with or without an opener), its
// cross-site iframes and its workers, recursively. Every paused request is
// answered once, with Fetch.continueRequest or Fetch.failRequest
// (BlockedByClient). A browser without a policy enables nothing.
//
// Popups are the hard part: Chromium holds a new window's first request only
// for a *browser-level* auto-attach with waitForDebuggerOnStart, and releases
// it only on Runtime.runIfWaitingForDebugger sent on that auto-attached
// session (detaching it leaves a noopener popup stuck for ever). Browser-level
// auto-attach is flat-only, and chromedp drops the messages of sessions it
// did not attach itself. So each Chromium that has policy browsers runs its
// hub: a private, non-flat session to the browser target, attached through
// chromedp's browser session and spoken to with Target.sendMessageToTarget.
// Within it, auto-attach is flat, so every target below it has a session id
// we can address. chromedp's own sessions are not touched.
//
// While a hub runs, every new page of that Chromium (also of browsers without
// a policy) is paused on creation until the hub resumes and releases it: one
// extra round trip per new page. The hub stops with the last policy browser
// of its Chromium.
package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/target"
	"github.com/rs/zerolog"
)

// childSetupTimeout bounds the preparation of a new target (Fetch, auto-attach,
// resume). A target not prepared in time stays paused, so it loads nothing.
const childSetupTimeout = 10 * time.Second

// errHubStopped fails what waits for a hub that stopped (or whose Chromium
// went away).
var errHubStopped = errors.New("request filter stopped")

// rawMessage is a protocol message inside the hub's session.
type rawMessage struct {
	SessionID target.SessionID `json:"sessionId,omitempty"`
	ID        int64            `json:"id,omitempty"`
	Method    string           `json:"method,omitempty"`
	Params    json.RawMessage  `json:"params,omitempty"`
	Result    json.RawMessage  `json:"result,omitempty"`
	Error     *cdproto.Error   `json:"error,omitempty"`
}

type attachedEvent struct {
	SessionID          target.SessionID `json:"sessionId"`
	WaitingForDebugger bool             `json:"waitingForDebugger"`
	TargetInfo         struct {
		TargetID         target.ID            `json:"targetId"`
		Type             string               `json:"type"`
		BrowserContextID cdp.BrowserContextID `json:"browserContextId"`
	} `json:"targetInfo"`
}

type pausedEvent struct {
	RequestID string `json:"requestId"`
	Request   struct {
		URL         string `json:"url"`
		URLFragment string `json:"urlFragment"`
	} `json:"request"`
	ResourceType string `json:"resourceType"`
}

// Parameters of the commands the hub sends.
var (
	fetchEnableParams = map[string]any{"patterns": []map[string]any{{"urlPattern": "*"}}}
	autoAttachParams  = map[string]any{"autoAttach": true, "waitForDebuggerOnStart": true, "flatten": true}
	emptyParams       = map[string]any{}
)

// Hub is one Chromium process's request filtering: the private session it
// runs while at least one Filter of its browsers does (see the package
// comment). A Hub that no filter uses costs nothing.
type Hub struct {
	browser cdp.Session     // the browser target's session (chromedp's)
	procCtx context.Context // ends when the process dies or is stopped
	log     zerolog.Logger

	mu   sync.Mutex
	conn *conn // nil while no filter uses the hub
}

// NewHub returns the hub of the Chromium process that browser is the
// browser-target session of; ctx ends with that process.
func NewHub(ctx context.Context, browser cdp.Session, log zerolog.Logger) *Hub {
	return &Hub{browser: browser, procCtx: ctx, log: log.With().Str("part", "policy").Logger()}
}

// Running reports whether the hub's private session is up: some filter
// uses it.
func (h *Hub) Running() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.conn != nil
}

// conn is the hub's private session while filters use it.
type conn struct {
	hub    *Hub
	root   atomic.Value    // target.SessionID of the private session, once attached
	ctx    context.Context // ends on stop, or when the reader ends
	cancel context.CancelFunc
	done   chan struct{} // closed when the reader ends
	wg     sync.WaitGroup
	nextID atomic.Int64

	mu        sync.Mutex
	refs      int // filters using the conn; guarded by Hub.mu
	pending   map[int64]chan rawMessage
	sessions  map[target.SessionID]*Filter
	byContext map[cdp.BrowserContextID]*Filter
}

// acquire returns the hub's conn, starting it if needed, with one more
// reference.
func (h *Hub) acquire(ctx context.Context) (*conn, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn == nil {
		c, err := h.start(ctx)
		if err != nil {
			return nil, err
		}
		h.conn = c
	}
	h.conn.refs++
	return h.conn, nil
}

// release drops a reference; the last one stops the conn.
func (h *Hub) release(c *conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c.refs--
	if c.refs > 0 {
		return
	}
	if h.conn == c {
		h.conn = nil
	}
	c.stop()
}

// start attaches the private session and turns on auto-attach to new
// pages, paused.
func (h *Hub) start(ctx context.Context) (*conn, error) {
	c := &conn{
		hub:       h,
		done:      make(chan struct{}),
		pending:   map[int64]chan rawMessage{},
		sessions:  map[target.SessionID]*Filter{},
		byContext: map[cdp.BrowserContextID]*Filter{},
	}
	c.ctx, c.cancel = context.WithCancel(h.procCtx)
	fail := func(err error) (*conn, error) {
		c.cancel()
		<-c.done
		c.wg.Wait()
		return nil, fmt.Errorf("chromium: request filter: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.ctx, cancel)()

	// Subscribe before attaching, so no message of the session is missed.
	msgs := cdp.Events(c.ctx, h.browser, target.ReceivedMessageFromTarget)
	go c.read(msgs)
	info, err := cdp.Call(ctx, h.browser, target.GetTargetInfo, target.GetTargetInfoParams{})
	if err != nil {
		return fail(err)
	}
	var res struct {
		SessionID target.SessionID `json:"sessionId"`
	}
	err = h.browser.Call(ctx, target.CommandAttachToTarget, map[string]any{"targetId": info.TargetInfo.TargetID, "flatten": false}, &res)
	if err != nil {
		return fail(err)
	}
	c.root.Store(res.SessionID)
	// Pages and shared workers, which belong to no page; a page's frames
	// and workers come with its own auto-attach. "tab" targets must stay
	// excluded when "page" is in.
	_, err = c.call(ctx, "", target.CommandSetAutoAttach, map[string]any{
		"autoAttach": true, "waitForDebuggerOnStart": true, "flatten": true,
		"filter": []map[string]any{{"type": "page"}, {"type": "shared_worker"}, {"exclude": true}},
	})
	if err != nil {
		c.detachRoot()
		return fail(err)
	}
	h.log.Debug().Msg("request filter hub started")
	return c, nil
}

// stop detaches the private session, which also releases any target it
// still holds paused, and waits for the conn's goroutines.
func (c *conn) stop() {
	c.detachRoot()
	c.cancel()
	<-c.done
	c.wg.Wait()
	c.hub.log.Debug().Msg("request filter hub stopped")
}

// rootSession is the private session's id ("" before it is attached).
func (c *conn) rootSession() target.SessionID {
	id, _ := c.root.Load().(target.SessionID)
	return id
}

func (c *conn) detachRoot() {
	h := c.hub
	root := c.rootSession()
	if root == "" || h.procCtx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(h.procCtx, 5*time.Second)
	defer cancel()
	if _, err := cdp.Call(ctx, h.browser, target.DetachFromTarget, target.DetachFromTargetParams{SessionID: root}); err != nil {
		h.log.Debug().Err(err).Msg("detaching the request filter session")
	}
}

// read dispatches the messages of the private session until the conn
// stops or Chromium goes away. It never blocks on Chromium: commands are
// sent from other goroutines.
func (c *conn) read(msgs iter.Seq2[target.EventReceivedMessageFromTarget, error]) {
	defer close(c.done)
	defer c.cancel() // waiters of replies that will not come
	for ev, err := range msgs {
		if err != nil {
			return
		}
		// chromedp attaches only flat sessions, so every non-flat message
		// is ours; before the attach answers, the id is not known yet.
		if root := c.rootSession(); root != "" && ev.SessionID != root {
			continue
		}
		var m rawMessage
		if err := json.Unmarshal([]byte(ev.Message), &m); err != nil {
			c.hub.log.Warn().Err(err).Msg("undecodable message in the request filter session")
			continue
		}
		c.dispatch(m)
	}
}

func (c *conn) dispatch(m rawMessage) {
	switch {
	case m.ID != 0:
		c.mu.Lock()
		ch := c.pending[m.ID]
		delete(c.pending, m.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	case m.Method == "Fetch.requestPaused":
		var ev pausedEvent
		if err := json.Unmarshal(m.Params, &ev); err != nil {
			c.hub.log.Warn().Err(err).Msg("undecodable Fetch.requestPaused")
			return
		}
		c.mu.Lock()
		f := c.sessions[m.SessionID]
		c.mu.Unlock()
		if f == nil || !f.enqueue(pausedRequest{m.SessionID, ev}) {
			// A browser that is going away: nothing it loads matters,
			// but the request is answered all the same.
			c.spawn(func() { c.answer(m.SessionID, ev.RequestID, false) })
		}
	case m.Method == "Target.attachedToTarget":
		var ev attachedEvent
		if err := json.Unmarshal(m.Params, &ev); err != nil {
			c.hub.log.Warn().Err(err).Msg("undecodable Target.attachedToTarget")
			return
		}
		c.attached(m.SessionID, ev)
	case m.Method == "Target.detachedFromTarget":
		var ev struct {
			SessionID target.SessionID `json:"sessionId"`
		}
		if json.Unmarshal(m.Params, &ev) == nil {
			c.mu.Lock()
			delete(c.sessions, ev.SessionID)
			c.mu.Unlock()
		}
	}
}

// attached decides about a new session: parent is the session whose
// auto-attach reported it ("" for the private root, which reports pages and
// shared workers).
func (c *conn) attached(parent target.SessionID, ev attachedEvent) {
	ti := ev.TargetInfo
	sid := ev.SessionID
	c.mu.Lock()
	var f *Filter
	main := false
	if parent == "" {
		f = c.byContext[ti.BrowserContextID]
		if f != nil && ti.TargetID == f.b.Target {
			// The browser's own page: keep exactly one session for it,
			// whichever comes first (auto-attached or requested).
			if f.mainSession == "" {
				f.mainSession, main = sid, true
			} else {
				f = nil
			}
		}
		// Any other page of a policy browser's context is a popup of
		// it; a shared worker was started by one of its pages.
	} else {
		f = c.sessions[parent]
	}
	if f != nil && f.unregistered {
		f = nil
	}
	if f != nil {
		c.sessions[sid] = f
	}
	c.mu.Unlock()

	if f == nil {
		// Another browser's page (or a duplicate session): let it run
		// and let go of it.
		c.spawn(func() { c.release(sid, ev.WaitingForDebugger) })
		return
	}
	c.spawn(func() {
		err := c.prepare(f, sid, ti.Type)
		if main {
			f.ready <- err
		}
	})
}

// prepare turns on interception and auto-attach in a new session of f's
// browser, then lets the target run. On failure the target stays paused,
// so it loads nothing unchecked.
func (c *conn) prepare(f *Filter, sid target.SessionID, typ string) error {
	ctx, cancel := context.WithTimeout(c.ctx, childSetupTimeout)
	defer cancel()
	if _, err := c.call(ctx, sid, "Fetch.enable", fetchEnableParams); err != nil {
		var cerr *cdproto.Error
		if !errors.As(err, &cerr) || cerr.Code != -32601 {
			f.b.Log.Warn().Err(err).Str("target", typ).Msg("request filter: Fetch.enable failed; target left paused")
			return err
		}
		// Workers have no Fetch domain: their requests are paused in
		// the session of the frame that owns them.
	}
	if _, err := c.call(ctx, sid, target.CommandSetAutoAttach, autoAttachParams); err != nil {
		f.b.Log.Warn().Err(err).Str("target", typ).Msg("request filter: auto-attach failed; target left paused")
		return err
	}
	if _, err := c.call(ctx, sid, "Runtime.runIfWaitingForDebugger", emptyParams); err != nil {
		return err
	}
	f.b.Log.Debug().Str("target", typ).Msg("target under the request filter")
	return nil
}

// release resumes a target the hub does not filter and detaches from it.
func (c *conn) release(sid target.SessionID, waiting bool) {
	ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
	defer cancel()
	if waiting {
		if _, err := c.call(ctx, sid, "Runtime.runIfWaitingForDebugger", emptyParams); err != nil {
			c.hub.log.Debug().Err(err).Msg("resuming a page")
		}
	}
	if _, err := c.call(ctx, "", target.CommandDetachFromTarget, map[string]any{"sessionId": sid}); err != nil {
		c.hub.log.Debug().Err(err).Msg("detaching from a page")
	}
}

// spawn runs fn on a goroutine that stop waits for.
func (c *conn) spawn(fn func()) {
	if c.ctx.Err() != nil {
		return
	}
	c.wg.Go(fn)
}

// send sends a command into session sid ("" = the private root) and returns
// its id.
func (c *conn) send(ctx context.Context, sid target.SessionID, method string, params any, reply chan rawMessage) (int64, error) {
	id := c.nextID.Add(1)
	p, err := json.Marshal(params)
	if err != nil {
		return 0, err
	}
	msg, err := json.Marshal(rawMessage{SessionID: sid, ID: id, Method: method, Params: p})
	if err != nil {
		return 0, err
	}
	if reply != nil {
		c.mu.Lock()
		c.pending[id] = reply
		c.mu.Unlock()
	}
	err = c.hub.browser.Call(ctx, "Target.sendMessageToTarget", map[string]any{"sessionId": c.rootSession(), "message": string(msg)}, nil)
	if err != nil && reply != nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}
	return id, err
}

// call sends a command and waits for its result.
func (c *conn) call(ctx context.Context, sid target.SessionID, method string, params any) (json.RawMessage, error) {
	reply := make(chan rawMessage, 1)
	id, err := c.send(ctx, sid, method, params, reply)
	if err != nil {
		return nil, err
	}
	select {
	case m := <-reply:
		if m.Error != nil {
			return nil, m.Error
		}
		return m.Result, nil
	case <-ctx.Done():
		c.forget(id)
		return nil, ctx.Err()
	case <-c.ctx.Done():
		c.forget(id)
		return nil, errHubStopped
	}
}

func (c *conn) forget(id int64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// answer continues or fails a paused request. Its reply is not awaited:
// nothing depends on it, and a request of a target that went away needs no
// answer.
func (c *conn) answer(sid target.SessionID, requestID string, allow bool) {
	var err error
	if allow {
		_, err = c.send(c.ctx, sid, "Fetch.continueRequest", map[string]any{"requestId": requestID}, nil)
	} else {
		_, err = c.send(c.ctx, sid, "Fetch.failRequest", map[string]any{"requestId": requestID, "errorReason": "BlockedByClient"}, nil)
	}
	if err != nil && c.ctx.Err() == nil {
		c.hub.log.Debug().Err(err).Msg("answering a paused request")
	}
}
