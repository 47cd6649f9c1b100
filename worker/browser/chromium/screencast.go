package chromium

import (
	"bytes"
	"context"
	"image/jpeg"
	"math"
	"time"

	"github.com/chromedp/cdproto/cdp"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/chromedp/cdproto/page"

	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

const defaultQuality = 80

// Screencast implements browser.Browser.
func (b *cbrowser) Screencast(ctx context.Context, opts browser.ScreencastOptions, sink func(browser.Frame)) error {
	if b.isDone() {
		return b.Err()
	}
	if !b.screencasting.CompareAndSwap(false, true) {
		return browser.ErrBusy
	}
	defer b.screencasting.Store(false)
	cctx, cancel, err := b.call(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	quality := int64(opts.Quality)
	if quality <= 0 || quality > 100 {
		quality = defaultQuality
	}
	b.mu.Lock()
	maxW, maxH := opts.MaxWidth, opts.MaxHeight
	config.OrDefault(&maxW, b.width)
	config.OrDefault(&maxH, b.height)
	b.mu.Unlock()

	// Subscribe before starting, so the first frame cannot be missed.
	frames := cdp.Events(cctx, endWith(cctx, b.t), page.ScreencastFrame)
	if _, err := pageCall(cctx, b, page.StartScreencast, page.StartScreencastParams{
		Format:        page.StartScreencastFormatJpeg,
		Quality:       &quality,
		MaxWidth:      int64(maxW),
		MaxHeight:     int64(maxH),
		EveryNthFrame: int64(max(1, opts.EveryNthFrame)),
	}); err != nil {
		return b.fail("start screencast", err)
	}
	defer func() {
		if b.ctx.Err() != nil {
			return // the page is gone, and its screencast with it
		}
		sctx, scancel := context.WithTimeout(b.ctx, 5*time.Second)
		defer scancel()
		if _, err := pageCall(sctx, b, page.StopScreencast, cdp.Empty{}); err != nil {
			b.log.Debug().Err(err).Msg("stop screencast")
		}
	}()

	for ev, err := range frames {
		if err != nil {
			break // ctx ended or the page went away
		}
		sink(b.frame(ev))
		// Chromium sends no further frame until this one is acked.
		if _, err := pageCall(cctx, b, page.ScreencastFrameAck, page.ScreencastFrameAckParams{SessionID: ev.SessionID}); err != nil {
			break
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return b.fail("screencast", browser.ErrClosed)
}

// frame converts a CDP frame.
func (b *cbrowser) frame(ev page.EventScreencastFrame) browser.Frame {
	f := browser.Frame{Data: ev.Data, Seq: b.frameSeq.Add(1), Timestamp: time.Now()}
	if cfg, err := jpeg.DecodeConfig(bytes.NewReader(ev.Data)); err == nil {
		f.Width, f.Height = cfg.Width, cfg.Height
	}
	if m := ev.Metadata; m != nil {
		f.DeviceWidth, f.DeviceHeight = m.DeviceWidth, m.DeviceHeight
		f.OffsetTop, f.ScrollX, f.ScrollY = m.OffsetTop, m.ScrollOffsetX, m.ScrollOffsetY
		if ts := float64(m.Timestamp); ts > 0 {
			sec, frac := math.Modf(ts)
			f.Timestamp = time.Unix(int64(sec), int64(frac*1e9))
		}
	}
	return f
}

// endingSession ends each subscription when ctx ends, even if nobody ranges
// over the iterator any more (cdp.Events alone would keep it).
type endingSession struct {
	cdp.Session
	ctx context.Context
}

func endWith(ctx context.Context, s cdp.Session) cdp.Session { return endingSession{s, ctx} }

func (e endingSession) Subscribe(method string) (<-chan jsonv2.Value, func()) {
	ch, cancel := e.Session.Subscribe(method)
	stop := context.AfterFunc(e.ctx, cancel)
	return ch, func() { stop(); cancel() }
}
