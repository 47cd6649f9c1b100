package registry

import (
	"context"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/rs/zerolog"
)

// invalidator tells the proxies which routes changed.
type invalidator struct {
	proxies contract.Proxy // nil: no one to tell
	log     zerolog.Logger
}

// acked tells the proxies that iids' routes changed and waits (a
// bounded time) until they applied it.
func (iv invalidator) acked(ctx context.Context, iids ...string) {
	inv, ok := iv.proxies.(interface {
		InvalidateAcked(context.Context, []string) error
	})
	if !ok {
		iv.instances(iids...)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := inv.InvalidateAcked(ctx, iids); err != nil {
		iv.log.Warn().Err(err).Strs("instances", iids).Msg("route invalidation not acknowledged in time")
	}
}

// instances tells the proxies that iids' routes changed.
func (iv invalidator) instances(iids ...string) {
	if iv.proxies != nil {
		_ = iv.proxies.Invalidate(context.Background(), iids)
	}
}

// worker tells the proxies that worker id is gone: they drop its routes
// and end the sockets they hold to it.
func (iv invalidator) worker(id string) {
	if iv.proxies != nil {
		_ = iv.proxies.InvalidateWorker(context.Background(), id)
	}
}
