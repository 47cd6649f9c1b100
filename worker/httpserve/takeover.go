package httpserve

import (
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/worker/cdpgate"
)

// Takeover: a person who may drive a session's browser (its liveUrl, with
// a writer's grant) acts on it in the client engine. Its automation client
// is told with CDP events of CloudBrowser's own, at browser level:
//
//	{"method": "CloudBrowser.takeover", "params": {"user": "ann"}}
//	{"method": "CloudBrowser.handback", "params": {"user": "ann"}}
//
// the second when a person presses the engine's Hand back, or once nobody
// has made a gesture for handBackAfter, so an automation can pause at the
// first and wait for the second. The engine's viewers see who drives.

// handBackAfter is how long a person's quiet hands the browser back when
// nobody presses Hand back: long enough to read a page or look up a
// password, short enough that a person who walked away does not stall
// the automation for good.
const handBackAfter = 2 * time.Minute

// takeover follows the people acting on one session's browser for one
// client connection.
type takeover struct {
	clk      clock.Clock
	announce func(user string) // to the engine's viewers ("": handed back)
	notices  chan cdpgate.Notice
	mu       sync.Mutex
	user     string // taking over now ("": nobody)
	timer    clock.Timer
	stopped  bool
}

func newTakeover(clk clock.Clock, announce func(user string)) *takeover {
	return &takeover{clk: clk, announce: announce, notices: make(chan cdpgate.Notice, 8)}
}

// gesture notes a person's gesture on the browser.
func (t *takeover) gesture(user string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	if t.user == "" {
		t.user = user
		t.send(cdpgate.Notice{Method: "CloudBrowser.takeover", Params: map[string]string{"user": user}})
		t.announce(user)
	}
	if t.timer != nil {
		t.timer.Stop()
	}
	t.timer = t.clk.AfterFunc(handBackAfter, t.handBack)
}

// handBack gives the browser back to the automation, if a person has it.
func (t *takeover) handBack() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped || t.user == "" {
		return
	}
	if t.timer != nil {
		t.timer.Stop()
	}
	t.send(cdpgate.Notice{Method: "CloudBrowser.handback", Params: map[string]string{"user": t.user}})
	t.user = ""
	t.announce("")
}

// send queues n; t.mu held. A client that does not read its events misses
// some rather than holding up the person.
func (t *takeover) send(n cdpgate.Notice) {
	select {
	case t.notices <- n:
	default:
	}
}

// stop ends it with the connection; the viewers no longer see anybody
// driving for it.
func (t *takeover) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	if t.timer != nil {
		t.timer.Stop()
	}
	if t.user != "" {
		t.announce("")
	}
}
