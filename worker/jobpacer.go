package worker

import (
	"context"
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/egress"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/jobs"
)

// Every request a job's browser sends is held to its host's budget
// (docs/jobs.md, "Every request counted"): the browser's egress endpoint
// asks the master (JobQueue.Request) for a go before it forwards one, and
// says when it was written and when it ended.

// pacedLeaser puts a leased browser's egress endpoint in job mode for the
// attempt it is leased for, and out of it when the browser goes back.
type pacedLeaser struct {
	jobs.Leaser
	w *Worker
}

func (l pacedLeaser) Lease(ctx context.Context, app string, allow []string) (jobs.Lease, error) {
	lease, err := l.Leaser.Lease(ctx, app, allow)
	if err != nil {
		return nil, err
	}
	run, ok := jobs.RunOf(ctx)
	e, isEndpoint := lease.Browser().Egress().(*egress.Endpoint)
	if !ok || !isEndpoint {
		return lease, nil
	}
	e.SetJob(egress.JobMode{
		Pacer:        &rmiPacer{w: l.w, run: run, sent: map[int64]chan struct{}{}},
		DocumentOnly: run.Spec.Kind == wire.JobCheck && !run.Spec.Subresources,
	})
	return pacedLease{Lease: lease, e: e}, nil
}

// pacedLease ends the job mode before the browser goes back; its
// requests are refused until the reset (or the app's pool) assigns the
// browser its next tenant.
type pacedLease struct {
	jobs.Lease
	e *egress.Endpoint
}

func (l pacedLease) Return() {
	l.e.EndJob()
	l.Lease.Return()
}

// rmiPacer asks the master for one attempt's requests.
type rmiPacer struct {
	w   *Worker
	run wire.JobRun

	mu   sync.Mutex
	sent map[int64]chan struct{} // a Sent call under way, awaited by End
}

// pacerCallTimeout bounds a sent or end report.
const pacerCallTimeout = 5 * time.Second

func (p *rmiPacer) req(n int64, hostport, phase string) wire.JobRequest {
	return wire.JobRequest{ID: p.run.ID, Attempt: p.run.Attempt, N: n, Host: hostport, Phase: phase}
}

func (p *rmiPacer) call(ctx context.Context, r wire.JobRequest) (wire.JobGo, error) {
	c := p.w.client
	if c == nil {
		return wire.JobGo{}, errNoMaster
	}
	return contract.JobQueueClient{C: c}.Request(ctx, r)
}

// Go asks until the master says go. A transient error (the master
// restarting) is retried; a refusal (the attempt is no longer current)
// refuses the request; a master without the call lets it go.
func (p *rmiPacer) Go(ctx context.Context, n int64, hostport string, doc bool) error {
	r := p.req(n, hostport, wire.RequestGo)
	r.Doc = doc
	return jobs.AwaitGo(ctx, func(ctx context.Context) (time.Duration, error) {
		g, err := p.call(ctx, r)
		return time.Duration(g.WaitMs) * time.Millisecond, err
	})
}

// Sent reports the write time in the background (the proxy must not
// wait). The document's start is the executor's to report (Started); its
// sent only bounds it from below (a tunnel that waited for a slot).
func (p *rmiPacer) Sent(n int64, hostport string, doc bool, after time.Duration) {
	done := make(chan struct{})
	p.mu.Lock()
	p.sent[n] = done
	p.mu.Unlock()
	r := p.req(n, hostport, wire.RequestSent)
	r.DelayNs, r.Doc = int64(after), doc
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), pacerCallTimeout)
		defer cancel()
		_, _ = p.call(ctx, r)
	}()
}

// End reports the end after the sent report (so the master spaces the
// next start from the write, not from the go).
func (p *rmiPacer) End(n int64, hostport string) {
	p.mu.Lock()
	done := p.sent[n]
	delete(p.sent, n)
	p.mu.Unlock()
	if done != nil {
		<-done
	}
	ctx, cancel := context.WithTimeout(context.Background(), pacerCallTimeout)
	defer cancel()
	if _, err := p.call(ctx, p.req(n, hostport, wire.RequestEnd)); err != nil {
		p.w.log.Debug().Err(err).Str("job", p.run.ID).Msg("request end not reported")
	}
}
