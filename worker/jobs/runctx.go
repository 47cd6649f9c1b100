package jobs

import (
	"context"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

type leaseRunKey struct{}

// withRun gives the Leaser the attempt it leases for (RunOf).
func withRun(ctx context.Context, run wire.JobRun) context.Context {
	return context.WithValue(ctx, leaseRunKey{}, run)
}

// RunOf is the attempt a Lease call is for: a worker holds the leased
// browser's requests to the job's budgets with it (docs/jobs.md, "Every
// request counted").
func RunOf(ctx context.Context) (wire.JobRun, bool) {
	run, ok := ctx.Value(leaseRunKey{}).(wire.JobRun)
	return run, ok
}
