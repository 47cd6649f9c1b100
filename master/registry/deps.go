package registry

import (
	"context"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

// What the registry needs from the rest of the master. Its clock
// (Config.Clock) is the master's, so a test with a fake clock drives
// liveness and failover timing too.

// Apps resolves an application by mount point, as sent to workers.
type Apps interface {
	App(name string) (wire.App, bool)
}

// AppsFunc adapts a function to Apps.
type AppsFunc func(name string) (wire.App, bool)

// App calls f.
func (f AppsFunc) App(name string) (wire.App, bool) { return f(name) }

// Store is the part of the state store the registry writes: epochs, the
// instance journal, drain flags and enrolled worker ids (*state.Store).
type Store interface {
	Get(bucket, key string, v any) (bool, error)
	Put(bucket, key string, v any) error
	Has(bucket, key string) bool
	Delete(bucket, key string) error
	Scan(bucket, after string, fn func(key string, raw []byte) bool)
	Update(fn func(state.Tx) error) error
}

// JobSlots is the job queue's view of the workers (*jobs.Workers): how
// many job slots a worker offers now (0: none, while it is disconnected,
// draining or leaving), and its removal (its running jobs are queued
// again).
type JobSlots interface {
	Set(id string, slots int)
	Remove(ctx context.Context, id string)
}

// Observer feeds the metrics.
type Observer interface {
	// Lookup is a route lookup of kind that started at start.
	Lookup(kind string, start time.Time)
	// Placed is a placement's outcome for an app of strategy.
	Placed(strategy, outcome string)
	// Refused is a quota refusal by limit.
	Refused(limit string)
}
