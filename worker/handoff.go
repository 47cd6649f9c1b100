package worker

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/cloudbrowser-go/cloudbrowser/internal/handoff"
	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
)

// startHandoff opens the socket proxies on this host hand client
// connections to (internal/handoff): a WebSocket handed over is served here
// like one dialed here, with the proxy out of its path. Without it (not
// Linux, a directory we cannot own) proxies relay as before.
func (w *Worker) startHandoff() {
	if w.cfg.NoHandoff {
		return
	}
	dir := w.cfg.HandoffDir
	if dir == "" {
		dir = filepath.Join(os.TempDir(), fmt.Sprintf("cloudbrowser-%d", os.Getuid()))
	}
	if err := handoff.PrivateDir(dir); err != nil {
		w.log.Warn().Err(err).Msg("no handoff socket: proxies will relay WebSockets")
		return
	}
	handoff.CleanStale(dir) // sockets of workers killed on this host before
	l, err := handoff.Listen(filepath.Join(dir, w.id+"-"+ids.Random(6)+".sock"), func(err error) {
		w.log.Warn().Err(err).Msg("handoff refused")
	})
	if err != nil {
		w.log.Warn().Err(err).Msg("no handoff socket: proxies will relay WebSockets")
		return
	}
	w.handoff = l
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		if err := w.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			w.log.Error().Err(err).Msg("handoff server stopped")
		}
	}()
}
