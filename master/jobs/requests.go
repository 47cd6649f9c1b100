package jobs

import (
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// Every request a job's browser sends is held to its host's budget
// (docs/jobs.md, "Every request counted"): the worker's egress endpoint
// asks for a go before it forwards one (Workers.Request), says when it
// was written and when it ended. A go needs a free concurrency slot of
// the budget (requests in flight, across the cluster) and the start gate's
// pacing (starts per second, interval, Crawl-delay, back-off), the same
// pacing the documents' Ready uses; the document itself passed Ready, so
// it takes only a slot.

// requestPoll is how soon a request waiting for a concurrency slot asks
// again (slots free when other requests end, which the master is told of
// but cannot wake the worker for).
const requestPoll = 50 * time.Millisecond

// heldRequest is a request in flight: its budget.
type heldRequest struct {
	budget string
}

// requestGo answers a go for one request: 0 (go: it holds a slot now, and
// unless doc a start) or how long to wait before asking again.
func (b *budget) requestGo(l Limits, key string, doc bool, now time.Time) time.Duration {
	if until := b.paused(now); !until.IsZero() && !doc {
		return until.Sub(now)
	}
	if l.Concurrent > 0 && b.inflight >= l.Concurrent {
		return requestPoll
	}
	if !doc {
		if w := b.gate(l, key, now); w > 0 {
			return w
		}
	}
	b.inflight++
	return 0
}

// sentNoEarlierThan spaces the next start from at, when that is later
// than the start the budget knows (a later time only widens the gap the
// site sees).
func (b *budget) sentNoEarlierThan(l Limits, at time.Time) {
	l = b.limits(l)
	if at.After(b.goLast) {
		b.goLast = at
	}
	if l.StartsPerSec > 0 {
		emit := emitInterval(l.StartsPerSec)
		if t := at.Add(emit + startMargin(emit)); t.After(b.goTat) {
			b.goTat = t
		}
	}
}

// requestKey names one request of an attempt in a budget's gate.
func requestKey(id string, attempt int, n int64) string {
	return attemptKey(id, attempt) + "#" + strconv.FormatInt(n, 10)
}

// requestBudget is the budget and limits a request of j to hostport counts
// against: the job's own for its own host:port; another host's own
// otherwise (its class rule's, else the defaults): a named class's budget,
// an address literal's IP:port, or the unresolved host:port.
func (s *scheduler) requestBudget(j *Job, hostport string) (string, Limits) {
	host, port, ok := splitRequestHost(hostport)
	if !ok {
		return j.Budget, s.classes.limitsOf(j)
	}
	hp := net.JoinHostPort(host, port)
	if u, err := url.Parse(j.Spec.URL); err == nil {
		if _, _, own := hostPort(u); own == hp {
			return j.Budget, s.classes.limitsOf(j)
		}
	}
	class, named, l := s.classes.of(host, hp)
	switch {
	case named:
		return "class:" + class, l
	case isAddr(host):
		a, _ := netip.ParseAddr(host)
		return net.JoinHostPort(a.Unmap().String(), port), l
	}
	return "host:" + hp, l
}

func isAddr(host string) bool {
	_, err := netip.ParseAddr(host)
	return err == nil
}

// splitRequestHost normalizes host:port as the decider does (lower case,
// no trailing dot, no brackets).
func splitRequestHost(hostport string) (host, port string, ok bool) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || port == "" {
		return "", "", false
	}
	return strings.TrimSuffix(strings.ToLower(host), "."), port, true
}

// request handles one phase of a request of j's current attempt.
func (s *scheduler) request(j *Job, r wire.JobRequest, now time.Time) time.Duration {
	ak := attemptKey(j.ID, r.Attempt)
	key := requestKey(j.ID, r.Attempt, r.N)
	held := s.reqs[ak]
	switch r.Phase {
	case wire.RequestGo:
		if _, ok := held[key]; ok {
			return 0 // a repeated go (the answer was lost): it holds its slot
		}
		bk, l := s.requestBudget(j, r.Host)
		b := s.budget(bk)
		if w := b.requestGo(b.limits(l), key, r.Doc, now); w > 0 {
			return w
		}
		if held == nil {
			held = map[string]heldRequest{}
			s.reqs[ak] = held
		}
		held[key] = heldRequest{budget: bk}
	case wire.RequestSent:
		if h, ok := held[key]; ok {
			_, l := s.requestBudget(j, r.Host)
			b := s.budget(h.budget)
			if r.Doc {
				// The document's start is the gate's (Started), but over
				// https the executor may have had to guess it before the
				// tunnel got its slot: its arrival here is a later bound.
				b.sentNoEarlierThan(l, now)
			} else {
				b.started(l, key, false, time.Duration(r.DelayNs), now)
			}
		}
	case wire.RequestEnd:
		if h, ok := held[key]; ok {
			s.endRequest(h, key, now)
			delete(held, key)
			if len(held) == 0 {
				delete(s.reqs, ak)
			}
		}
	}
	return 0
}

// endRequest gives a request's slot back; a go never confirmed sent ends
// its gate's wait.
func (s *scheduler) endRequest(h heldRequest, key string, now time.Time) {
	b := s.budgets[h.budget]
	if b == nil {
		return
	}
	b.inflight = max(b.inflight-1, 0)
	if b.pending == key {
		b.started(Limits{}, key, true, 0, now)
	}
}

// dropRequests ends every request an attempt still holds (the attempt
// ended: its browser's requests are over or no longer count).
func (s *scheduler) dropRequests(id string, attempt int, now time.Time) {
	ak := attemptKey(id, attempt)
	for key, h := range s.reqs[ak] {
		s.endRequest(h, key, now)
	}
	delete(s.reqs, ak)
}

// inflight is the requests in flight by budget (tests, status).
func (s *scheduler) inflight() map[string]int {
	out := map[string]int{}
	for k, b := range s.budgets {
		if b.inflight > 0 {
			out[k] = b.inflight
		}
	}
	return out
}
