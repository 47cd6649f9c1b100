package sessions

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// The wait queue: a session nobody can take right now (no worker, the
// pools full, the cluster starting, its instance moving) waits up to
// QueueWait for a browser to come free, at most QueueMax at once; beyond
// either the API answers 429 with Retry-After, before any WebSocket, and
// never hangs.

// Queue defaults.
const (
	DefaultQueueMax  = 16
	DefaultQueueWait = 30 * time.Second
	// retryEvery is how often a waiting request tries again without
	// having been woken (a browser freed on a worker, which the master
	// does not hear of).
	retryEvery = time.Second
)

// QueueError refuses a session that waited too long or found the queue
// full.
type QueueError struct {
	Msg        string
	RetryAfter time.Duration
}

func (e *QueueError) Error() string { return e.Msg }

// waitQueue counts the waiting requests and wakes them when a session
// ends.
type waitQueue struct {
	max  int
	wait time.Duration

	mu      sync.Mutex
	waiting int
	wake    chan struct{} // closed (and replaced) when a session ends
}

func (q *waitQueue) woken() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.wake == nil {
		q.wake = make(chan struct{})
	}
	return q.wake
}

// wakeAll tells the waiting requests a browser may be free.
func (q *waitQueue) wakeAll() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.wake != nil {
		close(q.wake)
		q.wake = nil
	}
}

func (q *waitQueue) enter() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.waiting >= q.max {
		return false
	}
	q.waiting++
	return true
}

func (q *waitQueue) leave() {
	q.mu.Lock()
	q.waiting--
	q.mu.Unlock()
}

// Waiting is how many session requests wait for a browser.
func (s *Service) Waiting() int {
	s.queue.mu.Lock()
	defer s.queue.mu.Unlock()
	return s.queue.waiting
}

// unavailable says err is worth waiting out: nobody can take a session
// now, but a browser may come free.
func unavailable(err error) bool {
	code, _ := codeOf(err)
	switch code {
	case wire.CodeNoWorkers, wire.CodeStarting, wire.CodeInstanceMoving, wire.CodePoolLimit:
		return true
	}
	return false
}

// CreateWaiting is Create, waiting in the queue while nobody can take the
// session.
func (s *Service) CreateWaiting(ctx context.Context, owner string, req Request, clientIP string) (Record, error) {
	q := &s.queue
	deadline := s.clk.Now().Add(q.wait)
	queued := false
	defer func() {
		if queued {
			q.leave()
		}
	}()
	for {
		woken := q.woken() // before trying: a session ending meanwhile wakes us
		rec, err := s.Create(ctx, owner, req, clientIP)
		if err == nil || !unavailable(err) || q.wait <= 0 {
			return rec, err
		}
		if !queued {
			if !q.enter() {
				s.m.refused.WithLabelValues("queue-full").Inc()
				return Record{}, &QueueError{Msg: fmt.Sprintf("no browser is free and %d session requests already wait: try again later", q.max), RetryAfter: retryUnavailable}
			}
			queued = true
		}
		left := deadline.Sub(s.clk.Now())
		if left <= 0 {
			s.m.refused.WithLabelValues("queue-timeout").Inc()
			return Record{}, &QueueError{Msg: fmt.Sprintf("no browser came free within %v: try again later", q.wait), RetryAfter: retryUnavailable}
		}
		t := clock.NewTimer(s.clk, min(left, retryEvery))
		select {
		case <-ctx.Done():
			t.Stop()
			return Record{}, ctx.Err()
		case <-woken:
		case <-t.C:
		}
		t.Stop()
	}
}
