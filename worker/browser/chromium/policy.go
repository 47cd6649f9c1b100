package chromium

// Navigation policy (browser.Options.Allow).
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
// did not attach itself. So each Chromium that has policy browsers gets a
// hub: a private, non-flat session to the browser target, attached through
// chromedp's browser session and spoken to with Target.sendMessageToTarget.
// Within it, auto-attach is flat, so every target below it has a session id
// we can address. chromedp's own sessions are not touched.
//
// While a hub runs, every new page of that Chromium (also of browsers without
// a policy) is paused on creation until the hub resumes and releases it: one
// extra round trip per new page. The hub stops with the last policy browser
// of its Chromium.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/target"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// childSetupTimeout bounds the preparation of a new target (Fetch, auto-attach,
// resume). A target not prepared in time stays paused, so it loads nothing.
const childSetupTimeout = 10 * time.Second

// maxLoggedURL is how much of a URL goes into a log line or an error.
const maxLoggedURL = 200

// blockedErrorText is what Page.navigate reports for a document request that
// the policy failed.
const blockedErrorText = "net::ERR_BLOCKED_BY_CLIENT"

// shortURL truncates u to maxLoggedURL bytes on a rune boundary.
func shortURL(u string) string {
	if len(u) <= maxLoggedURL {
		return u
	}
	i := maxLoggedURL
	for i > 0 && !utf8.RuneStart(u[i]) {
		i--
	}
	return u[:i] + "…"
}

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

// hub is one Chromium's private browser-level session; see the top of the
// file.
type hub struct {
	p      *process
	log    zerolog.Logger
	root   atomic.Value    // target.SessionID of the private session, once attached
	ctx    context.Context // ends on stop, or when the reader ends
	cancel context.CancelFunc
	done   chan struct{} // closed when the reader ends
	wg     sync.WaitGroup
	nextID atomic.Int64

	mu        sync.Mutex
	refs      int // filters using the hub; guarded by process.hubMu
	pending   map[int64]chan rawMessage
	sessions  map[target.SessionID]*filter
	byContext map[cdp.BrowserContextID]*filter
}

// filter is the policy of one browser.
type filter struct {
	b     *cbrowser
	h     *hub
	allow func(string) bool

	blocked atomic.Uint64
	ready   chan error // the main page's session is set up (cap 1)

	// guarded by hub.mu
	mainSession  target.SessionID
	unregistered bool

	mu      sync.Mutex
	queue   []pausedRequest
	stopped bool          // the loop ended; enqueue refuses
	wake    chan struct{} // cap 1
	quit    chan struct{}
	once    sync.Once
}

type pausedRequest struct {
	session target.SessionID
	ev      pausedEvent
}

// acquireHub returns p's hub, starting it if needed, with one more reference.
func (r *Runtime) acquireHub(ctx context.Context, p *process) (*hub, error) {
	p.hubMu.Lock()
	defer p.hubMu.Unlock()
	if p.hub == nil {
		h, err := r.startHub(ctx, p)
		if err != nil {
			return nil, err
		}
		p.hub = h
	}
	p.hub.refs++
	return p.hub, nil
}

// releaseHub drops a reference; the last one stops the hub.
func (r *Runtime) releaseHub(p *process, h *hub) {
	p.hubMu.Lock()
	defer p.hubMu.Unlock()
	h.refs--
	if h.refs > 0 {
		return
	}
	if p.hub == h {
		p.hub = nil
	}
	h.stop()
}

// startHub attaches the private session and turns on auto-attach to new
// pages, paused.
func (r *Runtime) startHub(ctx context.Context, p *process) (*hub, error) {
	h := &hub{
		p:         p,
		log:       r.log.With().Int("slot", p.slot.idx).Str("part", "policy").Logger(),
		done:      make(chan struct{}),
		pending:   map[int64]chan rawMessage{},
		sessions:  map[target.SessionID]*filter{},
		byContext: map[cdp.BrowserContextID]*filter{},
	}
	h.ctx, h.cancel = context.WithCancel(p.rootCtx)
	fail := func(err error) (*hub, error) {
		h.cancel()
		<-h.done
		h.wg.Wait()
		return nil, fmt.Errorf("chromium: request filter: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(h.ctx, cancel)()

	// Subscribe before attaching, so no message of the session is missed.
	msgs := cdp.Events(h.ctx, p.browser, target.ReceivedMessageFromTarget)
	go h.read(msgs)
	info, err := cdp.Call(ctx, p.browser, target.GetTargetInfo, target.GetTargetInfoParams{})
	if err != nil {
		return fail(err)
	}
	var res struct {
		SessionID target.SessionID `json:"sessionId"`
	}
	err = p.browser.Call(ctx, target.CommandAttachToTarget, map[string]any{"targetId": info.TargetInfo.TargetID, "flatten": false}, &res)
	if err != nil {
		return fail(err)
	}
	h.root.Store(res.SessionID)
	// Pages and shared workers, which belong to no page; a page's frames
	// and workers come with its own auto-attach. "tab" targets must stay
	// excluded when "page" is in.
	_, err = h.call(ctx, "", target.CommandSetAutoAttach, map[string]any{
		"autoAttach": true, "waitForDebuggerOnStart": true, "flatten": true,
		"filter": []map[string]any{{"type": "page"}, {"type": "shared_worker"}, {"exclude": true}},
	})
	if err != nil {
		h.detachRoot()
		return fail(err)
	}
	h.log.Debug().Msg("request filter hub started")
	return h, nil
}

// stop detaches the private session, which also releases any target it
// still holds paused, and waits for the hub's goroutines.
func (h *hub) stop() {
	h.detachRoot()
	h.cancel()
	<-h.done
	h.wg.Wait()
	h.log.Debug().Msg("request filter hub stopped")
}

// rootSession is the private session's id ("" before it is attached).
func (h *hub) rootSession() target.SessionID {
	id, _ := h.root.Load().(target.SessionID)
	return id
}

func (h *hub) detachRoot() {
	root := h.rootSession()
	if root == "" || h.p.rootCtx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(h.p.rootCtx, 5*time.Second)
	defer cancel()
	if _, err := cdp.Call(ctx, h.p.browser, target.DetachFromTarget, target.DetachFromTargetParams{SessionID: root}); err != nil {
		h.log.Debug().Err(err).Msg("detaching the request filter session")
	}
}

// read dispatches the messages of the private session until the hub stops or
// Chromium goes away. It never blocks on Chromium: commands are sent from
// other goroutines.
func (h *hub) read(msgs iter.Seq2[target.EventReceivedMessageFromTarget, error]) {
	defer close(h.done)
	defer h.cancel() // waiters of replies that will not come
	for ev, err := range msgs {
		if err != nil {
			return
		}
		// chromedp attaches only flat sessions, so every non-flat message
		// is ours; before the attach answers, the id is not known yet.
		if root := h.rootSession(); root != "" && ev.SessionID != root {
			continue
		}
		var m rawMessage
		if err := json.Unmarshal([]byte(ev.Message), &m); err != nil {
			h.log.Warn().Err(err).Msg("undecodable message in the request filter session")
			continue
		}
		h.dispatch(m)
	}
}

func (h *hub) dispatch(m rawMessage) {
	switch {
	case m.ID != 0:
		h.mu.Lock()
		ch := h.pending[m.ID]
		delete(h.pending, m.ID)
		h.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	case m.Method == "Fetch.requestPaused":
		var ev pausedEvent
		if err := json.Unmarshal(m.Params, &ev); err != nil {
			h.log.Warn().Err(err).Msg("undecodable Fetch.requestPaused")
			return
		}
		h.mu.Lock()
		f := h.sessions[m.SessionID]
		h.mu.Unlock()
		if f == nil || !f.enqueue(pausedRequest{m.SessionID, ev}) {
			// A browser that is going away: nothing it loads matters,
			// but the request is answered all the same.
			h.spawn(func() { h.answer(m.SessionID, ev.RequestID, false) })
		}
	case m.Method == "Target.attachedToTarget":
		var ev attachedEvent
		if err := json.Unmarshal(m.Params, &ev); err != nil {
			h.log.Warn().Err(err).Msg("undecodable Target.attachedToTarget")
			return
		}
		h.attached(m.SessionID, ev)
	case m.Method == "Target.detachedFromTarget":
		var ev struct {
			SessionID target.SessionID `json:"sessionId"`
		}
		if json.Unmarshal(m.Params, &ev) == nil {
			h.mu.Lock()
			delete(h.sessions, ev.SessionID)
			h.mu.Unlock()
		}
	}
}

// attached decides about a new session: parent is the session whose
// auto-attach reported it ("" for the private root, which reports pages and
// shared workers).
func (h *hub) attached(parent target.SessionID, ev attachedEvent) {
	ti := ev.TargetInfo
	sid := ev.SessionID
	h.mu.Lock()
	var f *filter
	main := false
	if parent == "" {
		f = h.byContext[ti.BrowserContextID]
		if f != nil && ti.TargetID == f.b.t.TargetID {
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
		f = h.sessions[parent]
	}
	if f != nil && f.unregistered {
		f = nil
	}
	if f != nil {
		h.sessions[sid] = f
	}
	h.mu.Unlock()

	if f == nil {
		// Another browser's page (or a duplicate session): let it run
		// and let go of it.
		h.spawn(func() { h.release(sid, ev.WaitingForDebugger) })
		return
	}
	h.spawn(func() {
		err := h.prepare(f, sid, ti.Type)
		if main {
			f.ready <- err
		}
	})
}

// prepare turns on interception and auto-attach in a new session of f's
// browser, then lets the target run. On failure the target stays paused,
// so it loads nothing unchecked.
func (h *hub) prepare(f *filter, sid target.SessionID, typ string) error {
	ctx, cancel := context.WithTimeout(h.ctx, childSetupTimeout)
	defer cancel()
	if _, err := h.call(ctx, sid, "Fetch.enable", fetchEnableParams); err != nil {
		var cerr *cdproto.Error
		if !errors.As(err, &cerr) || cerr.Code != -32601 {
			f.b.log.Warn().Err(err).Str("target", typ).Msg("request filter: Fetch.enable failed; target left paused")
			return err
		}
		// Workers have no Fetch domain: their requests are paused in
		// the session of the frame that owns them.
	}
	if _, err := h.call(ctx, sid, target.CommandSetAutoAttach, autoAttachParams); err != nil {
		f.b.log.Warn().Err(err).Str("target", typ).Msg("request filter: auto-attach failed; target left paused")
		return err
	}
	if _, err := h.call(ctx, sid, "Runtime.runIfWaitingForDebugger", emptyParams); err != nil {
		return err
	}
	f.b.log.Debug().Str("target", typ).Msg("target under the request filter")
	return nil
}

// release resumes a target the hub does not filter and detaches from it.
func (h *hub) release(sid target.SessionID, waiting bool) {
	ctx, cancel := context.WithTimeout(h.ctx, 5*time.Second)
	defer cancel()
	if waiting {
		if _, err := h.call(ctx, sid, "Runtime.runIfWaitingForDebugger", emptyParams); err != nil {
			h.log.Debug().Err(err).Msg("resuming a page")
		}
	}
	if _, err := h.call(ctx, "", target.CommandDetachFromTarget, map[string]any{"sessionId": sid}); err != nil {
		h.log.Debug().Err(err).Msg("detaching from a page")
	}
}

// spawn runs fn on a goroutine that stop waits for.
func (h *hub) spawn(fn func()) {
	if h.ctx.Err() != nil {
		return
	}
	h.wg.Go(fn)
}

// send sends a command into session sid ("" = the private root) and returns
// its id.
func (h *hub) send(ctx context.Context, sid target.SessionID, method string, params any, reply chan rawMessage) (int64, error) {
	id := h.nextID.Add(1)
	p, err := json.Marshal(params)
	if err != nil {
		return 0, err
	}
	msg, err := json.Marshal(rawMessage{SessionID: sid, ID: id, Method: method, Params: p})
	if err != nil {
		return 0, err
	}
	if reply != nil {
		h.mu.Lock()
		h.pending[id] = reply
		h.mu.Unlock()
	}
	err = h.p.browser.Call(ctx, "Target.sendMessageToTarget", map[string]any{"sessionId": h.rootSession(), "message": string(msg)}, nil)
	if err != nil && reply != nil {
		h.mu.Lock()
		delete(h.pending, id)
		h.mu.Unlock()
	}
	return id, err
}

// call sends a command and waits for its result.
func (h *hub) call(ctx context.Context, sid target.SessionID, method string, params any) (json.RawMessage, error) {
	reply := make(chan rawMessage, 1)
	id, err := h.send(ctx, sid, method, params, reply)
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
		h.forget(id)
		return nil, ctx.Err()
	case <-h.ctx.Done():
		h.forget(id)
		return nil, errHubStopped
	}
}

func (h *hub) forget(id int64) {
	h.mu.Lock()
	delete(h.pending, id)
	h.mu.Unlock()
}

// answer continues or fails a paused request. Its reply is not awaited:
// nothing depends on it, and a request of a target that went away needs no
// answer.
func (h *hub) answer(sid target.SessionID, requestID string, allow bool) {
	var err error
	if allow {
		_, err = h.send(h.ctx, sid, "Fetch.continueRequest", map[string]any{"requestId": requestID}, nil)
	} else {
		_, err = h.send(h.ctx, sid, "Fetch.failRequest", map[string]any{"requestId": requestID, "errorReason": "BlockedByClient"}, nil)
	}
	if err != nil && h.ctx.Err() == nil {
		h.log.Debug().Err(err).Msg("answering a paused request")
	}
}

// newFilter registers b's policy with its Chromium's hub and waits until
// the page's requests are intercepted. b's page must exist and must not
// have loaded anything yet.
func (r *Runtime) newFilter(ctx context.Context, b *cbrowser, allow func(string) bool) (*filter, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, browser.ErrClosed
	}
	r.wg.Add(1)
	r.mu.Unlock()
	f := &filter{
		b:     b,
		allow: allow,
		ready: make(chan error, 1),
		wake:  make(chan struct{}, 1),
		quit:  make(chan struct{}),
	}
	go f.loop()
	h, err := r.acquireHub(ctx, b.p)
	if err != nil {
		f.stopLoop()
		return nil, err
	}
	f.h = h
	h.mu.Lock()
	h.byContext[b.contextID] = f
	h.mu.Unlock()
	// The page may already be attached (paused) to the hub if the hub ran
	// when chromedp created it; asking again is harmless, the first session
	// wins.
	if _, err = h.call(ctx, "", target.CommandAttachToTarget, map[string]any{"targetId": b.t.TargetID, "flatten": true}); err == nil {
		select {
		case err = <-f.ready:
		case <-ctx.Done():
			err = ctx.Err()
		case <-h.ctx.Done():
			err = errHubStopped
		}
	}
	if err != nil {
		f.close()
		return nil, fmt.Errorf("chromium: request filter: %w", err)
	}
	return f, nil
}

// close unregisters the filter (after the browser's targets are gone) and
// stops its loop.
func (f *filter) close() {
	f.stopLoop()
	if f.h == nil {
		return
	}
	f.h.mu.Lock()
	if f.unregistered {
		f.h.mu.Unlock()
		return
	}
	f.unregistered = true
	if f.h.byContext[f.b.contextID] == f {
		delete(f.h.byContext, f.b.contextID)
	}
	for sid, g := range f.h.sessions {
		if g == f {
			delete(f.h.sessions, sid)
		}
	}
	f.h.mu.Unlock()
	f.b.rt.releaseHub(f.b.p, f.h)
}

func (f *filter) stopLoop() { f.once.Do(func() { close(f.quit) }) }

// enqueue hands a paused request to the filter's loop; false if the loop
// has ended.
func (f *filter) enqueue(req pausedRequest) bool {
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return false
	}
	f.queue = append(f.queue, req)
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
	return true
}

// loop decides and answers the paused requests in arrival order, so a
// slow policy func delays only its own browser. When it ends it answers
// what is left, and enqueue refuses from then on.
func (f *filter) loop() {
	defer f.b.rt.wg.Done()
	for {
		select {
		case <-f.wake:
			f.decide(f.take(false))
		case <-f.quit:
			f.decide(f.take(true))
			return
		}
	}
}

func (f *filter) take(stop bool) []pausedRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queue
	f.queue = nil
	f.stopped = f.stopped || stop
	return q
}

func (f *filter) decide(q []pausedRequest) {
	for _, req := range q {
		url := req.ev.Request.URL + req.ev.Request.URLFragment
		ok := f.check(url)
		if !ok {
			f.count()
			f.b.log.Debug().Str("url", shortURL(url)).Str("type", req.ev.ResourceType).Msg("request blocked")
		}
		f.h.answer(req.session, req.ev.RequestID, ok)
	}
}

// check applies the policy; a panicking policy denies.
func (f *filter) check(url string) bool {
	ok, p := browser.CheckURL(f.allow, url)
	if p != nil {
		f.b.log.Error().Str("url", shortURL(url)).Str("panic", fmt.Sprint(p)).Msg("navigation policy panicked; denied")
	}
	return ok
}

func (f *filter) count() {
	f.blocked.Add(1)
	f.b.rt.blocked.Add(1)
}

// isBlockedError reports whether a Page.navigate error text is the policy's.
func isBlockedError(text string) bool { return strings.Contains(text, blockedErrorText) }
