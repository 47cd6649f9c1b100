package httpserve

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/cdpticket"
	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
	"github.com/cloudbrowser-go/cloudbrowser/worker/cdpgate"
	"github.com/cloudbrowser-go/cloudbrowser/worker/engine"
)

// The automation endpoint (docs/automation.md): <Browser URL>/cdp, a CDP
// browser endpoint confined to the browser's context (worker/cdpgate). The
// master opens the session and signs its ticket (internal/cdpticket); the
// ticket, not a cookie, says who may speak CDP here: automation clients
// send no cookies and many cannot set headers.

// cdpMaxContexts is how many more browser contexts a session's client may
// create (each is a whole browser's worth of memory).
const cdpMaxContexts = 3

// cdpUpgrader accepts automation clients from any origin: the ticket in
// the URL is the credential, and CDP frames are large (screenshots).
var cdpUpgrader = websocket.Upgrader{
	ReadBufferSize: 64 << 10, WriteBufferSize: 64 << 10,
	CheckOrigin: func(*http.Request) bool { return true },
}

// serveCDP upgrades a ticketed request to the browser's CDP gate and runs
// it until the client leaves or the browser ends. (A function, not a
// method: Server is at its size.)
func serveCDP(s *Server, rw http.ResponseWriter, r *http.Request, id string, t urlkind.Target) {
	refuse := func(status int, title, msg string) { s.page(rw, r, id, status, title, msg) }
	downloads := strings.HasPrefix(t.Rest, "cdp/")
	if !downloads && !websocket.IsWebSocketUpgrade(r) {
		refuse(http.StatusBadRequest, "Bad request", "This is a CDP WebSocket endpoint: connect with an automation client (Playwright's connectOverCDP, Puppeteer's connect, chromedp).")
		return
	}
	key := s.users.cdpKey.Load()
	cl, ok := cdpticket.Check(*key, t.InstanceID, t.BrowserID, r.URL.Query().Get("ticket"), time.Now())
	if !ok {
		s.log.Info().Str("request_id", id).Str("browser", t.BrowserID).Msg("automation refused: no valid ticket")
		refuse(http.StatusForbidden, "No access", "This automation session's ticket is missing, expired or for another browser: open a session with POST /api/v1/sessions.")
		return
	}
	in, b, ok := s.findBrowser(rw, r, id, t, func(Instance) {
		refuse(http.StatusGone, "Session ended", "This automation session's browser was released.")
	})
	if !ok {
		return
	}
	if downloads {
		serveCDPDownloads(s, rw, r, id, b.Hub().Files(), strings.TrimPrefix(t.Rest, "cdp/"))
		return
	}
	ep, done, ok := b.DevTools()
	if !ok {
		refuse(http.StatusServiceUnavailable, "No automation here", "This worker's browsers take no automation clients (its runtime has no DevTools port).")
		return
	}
	if cl.Width > 0 {
		// The session's viewport, before its client sees the page.
		rctx, rcancel := context.WithTimeout(r.Context(), 10*time.Second)
		err := b.Resize(rctx, cl.Width, cl.Height)
		rcancel()
		if err != nil {
			s.log.Warn().Err(err).Str("request_id", id).Msg("automation session's viewport not set")
		}
	}
	conn, err := cdpgate.Upgrade(&cdpUpgrader, rw, r, nil)
	if err != nil {
		return // the upgrader answered
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	var expired <-chan time.Time
	if !cl.Expires.IsZero() {
		// The master closes the session then; the client hears why first.
		t := time.NewTimer(time.Until(cl.Expires))
		defer t.Stop()
		expired = t.C
	}
	go func() {
		select {
		case <-done:
			cancel(errBrowserEnded)
		case <-expired:
			cancel(errSessionTimeout)
		case <-ctx.Done():
		}
	}()
	// The app's navigation policy covers the pages of the browser's own
	// context; a context the client made would escape it.
	maxContexts := cdpMaxContexts
	if ep.Policy {
		maxContexts = 0
	}
	log := s.log.With().Str("request_id", id).Str("browser", t.BrowserID).Str("session", cl.Session).Str("owner", cl.Owner).Logger()
	log.Info().Msg("automation client connected")
	defer b.ClientConnected()()
	activity, leave := s.auto.join(t.BrowserID, cl, autoHost{
		close: func(reason string) {
			cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer ccancel()
			in.Close(cctx, reason)
		},
		viewers: func() int { return b.Hub().Count() },
		hold:    b.HoldIdle,
		log:     log,
	}, cancel)
	defer leave()
	people := newTakeover(s.auto.clock(), func(user string) { engine.AnnounceTakeover(b.Hub(), user) })
	defer people.stop()
	defer b.OnPeople(func(p PersonAct) {
		activity() // a person at work: the session is not idle
		if p.HandBack {
			people.handBack()
		} else {
			people.gesture(p.User)
		}
	})()
	res, err := cdpgate.Serve(ctx, conn, cdpgate.Config{
		Upstream: ep.URL, Context: ep.Context, Page: ep.Page, MaxContexts: maxContexts,
		ContextParams: func(p map[string]any) {
			if ep.ProxyURL != "" {
				p["proxyServer"] = ep.ProxyURL
			}
		},
		DownloadPath: b.Hub().Files().DownloadDir(),
		Activity:     activity,
		Notices:      people.notices,
		Log:          log,
	})
	ev := log.Info()
	if err != nil {
		ev = log.Warn().Err(err)
	}
	ev.Str("reason", res.Reason.String()).Int64("forwarded", res.Forwarded).Int64("refused", res.Refused).Msg("automation client left")
}

// errBrowserEnded closes an automation client whose browser ended (the
// session was deleted or timed out); errSessionIdle one whose session went
// idle.
var (
	errBrowserEnded   = errors.New("the session's browser ended")
	errSessionIdle    = errors.New("the session was idle too long")
	errSessionTimeout = errors.New("the session reached its time limit")
)

// serveCDPDownloads answers a session's downloads under its ticket:
// GET <Browser URL>/cdp/downloads lists the finished downloads of the
// session's browser (JSON), GET …/cdp/downloads/<guid> fetches one (the
// guid of Browser.downloadWillBegin). They are the browser's files door's
// downloads: the same limit, the same hour, gone with the browser.
func serveCDPDownloads(s *Server, rw http.ResponseWriter, r *http.Request, id string, door *engine.Files, rest string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		rw.Header().Set("Allow", "GET, HEAD")
		s.fileError(rw, r, id, http.StatusMethodNotAllowed, "Downloads are read with GET.")
		return
	}
	switch dl, one := strings.CutPrefix(rest, "downloads/"); {
	case rest == "downloads":
		if door.DownloadDir() == "" {
			s.fileError(rw, r, id, http.StatusForbidden, "This app does not let its users download files.")
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		rw.Header().Set("Cache-Control", "private, no-store")
		_ = json.NewEncoder(rw).Encode(map[string]any{"downloads": door.Downloads()})
	case one && dl != "" && !strings.Contains(dl, "/"):
		s.serveDownload(rw, r, id, door, dl)
	default:
		s.fileError(rw, r, id, http.StatusNotFound, "There is nothing at this address.")
	}
}
