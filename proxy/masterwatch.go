package proxy

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// A proxy process reports its counters to the master every reportEvery,
// and the reports double as a heartbeat. A master that stops answering on
// a connection that did not break (a network cut, a frozen master: TCP
// notices neither for minutes) would otherwise hold every question for
// the whole route timeout: a new placement would wait 5 s for its 503, and
// an instance whose cached route expired would wait 5 s per request before
// its fallback route. After silentReports reports in a row without an
// answer, the proxy closes the connection, so questions fail at once
// (ConnectWait) with "master unavailable" while it redials, /readyz says
// so, and the next connection flushes the route cache (invalidations sent
// meanwhile were lost).
const (
	reportEvery   = 2 * time.Second
	silentReports = 2
)

// masterSilence counts the reports the master left unanswered.
type masterSilence struct {
	client *rmi.Client
	log    zerolog.Logger
	misses int // in a row
}

// report sends r over the current connection and closes it when the
// master has not answered silentReports reports in a row.
func (m *masterSilence) report(ctx context.Context, r wire.ProxyReport) {
	rctx, cancel := context.WithTimeout(ctx, reportEvery)
	defer cancel()
	c, err := m.client.Conn(rctx)
	if err != nil {
		m.misses = 0 // no connection: the client is redialing
		return
	}
	err = contract.RouterClient{C: c}.ProxyReport(rctx, r)
	var re *rmi.RemoteError
	if err == nil || errors.As(err, &re) || !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		m.misses = 0 // answered (maybe with an error), or the connection broke on its own
		return
	}
	if m.misses++; m.misses < silentReports {
		return
	}
	m.misses = 0
	m.log.Warn().Str("master", c.RemoteAddr().String()).Int("reports", silentReports).
		Msg("the master answers nothing on its connection: closing it (master unavailable until a new one)")
	_ = c.Close()
}
