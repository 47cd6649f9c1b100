package chromium

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// Sign-in challenges. A site that answers 401 with WWW-Authenticate
// (basic or digest auth) makes a browser ask its user for credentials;
// headless Chromium has no one to ask, so the page's Fetch domain is on
// for the page's documents (Fetch.authRequired comes only for requests it
// intercepts: documents cost one round trip per navigation, every request
// would cost one each) and the challenge becomes one of the page's dialogs
// (kind auth), answered with the user's name and password
// (Fetch.continueWithAuth) or cancelled: the site's 401 page shows, as in
// any browser. One challenge is asked at a time; another meanwhile, and a
// proxy's (the egress guard asks none), are cancelled at once. The request
// waits for the answer, up to the dialogs' timeout.

// documentRequests are the requests whose sign-ins are asked: a site's protected
// page; its subresources reuse the credentials the browser then keeps for
// the realm.
var documentRequests = []*fetch.RequestPattern{{URLPattern: "*", ResourceType: network.ResourceTypeDocument, RequestStage: fetch.RequestStageRequest}}

// signIns is a browser's open sign-in challenge.
type signIns struct {
	b       *cbrowser
	prompts browser.Prompts

	mu  sync.Mutex
	req fetch.RequestID // of the open challenge ("" = none)
}

func (s *signIns) init(b *cbrowser, timeout time.Duration, ids *atomic.Uint64) {
	s.b = b
	s.prompts.IDs = ids
	s.prompts.Timeout = timeout
	s.prompts.Log = b.log
	s.prompts.Handle = s.answer
}

// setupAuth turns the page's sign-in challenges into events.
func setupAuth(ctx context.Context, b *cbrowser) error {
	_, err := pageCall(ctx, b, fetch.Enable, fetch.EnableParams{
		Patterns: documentRequests, HandleAuthRequests: new(true),
	})
	return err
}

// authEvent sees the page's events on chromedp's reader goroutine: it
// records, and answers only on goroutines of its own.
func (s *signIns) authEvent(ev any) {
	switch ev := ev.(type) {
	case *fetch.EventAuthRequired:
		ch := ev.AuthChallenge
		s.mu.Lock()
		busy := s.req != ""
		if ch != nil && ch.Source != fetch.AuthChallengeSourceProxy && !busy {
			s.req = ev.RequestID
			s.mu.Unlock()
			s.prompts.Opened(browser.PromptAuth, ch.Realm, "", ch.Origin)
			return
		}
		s.mu.Unlock()
		s.b.rt.track(func() { s.cancel(ev.RequestID) })
	case *fetch.EventRequestPaused:
		// A document on its way: on at once.
		s.b.rt.track(func() {
			ctx, cancel := context.WithTimeout(s.b.ctx, 10*time.Second)
			defer cancel()
			_, _ = pageCall(ctx, s.b, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
		})
	}
}

// answer hands the user's answer to the waiting request.
func (s *signIns) answer(ctx context.Context, a browser.PromptAnswer) error {
	s.mu.Lock()
	req := s.req
	s.mu.Unlock()
	resp := &fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseCancelAuth}
	if a.Accept {
		resp = &fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseProvideCredentials, Username: a.Text, Password: a.Password}
	}
	_, err := pageCall(ctx, s.b, fetch.ContinueWithAuth, fetch.ContinueWithAuthParams{RequestID: req, AuthChallengeResponse: resp})
	if err != nil && s.b.ctx.Err() == nil {
		// The request went (the page navigated on, the site gave up): so
		// did its question.
		s.b.log.Debug().Err(err).Msg("sign-in answered after its request ended")
	}
	s.mu.Lock()
	if s.req == req {
		s.req = ""
	}
	s.mu.Unlock()
	s.prompts.Closed(a.Accept && err == nil)
	return nil
}

// cancel refuses a challenge nobody is asked.
func (s *signIns) cancel(req fetch.RequestID) {
	ctx, cancel := context.WithTimeout(s.b.ctx, 10*time.Second)
	defer cancel()
	_, _ = pageCall(ctx, s.b, fetch.ContinueWithAuth, fetch.ContinueWithAuthParams{
		RequestID: req, AuthChallengeResponse: &fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseCancelAuth},
	})
}
