package chromium

import (
	"bytes"
	"context"
	"fmt"
	"image/jpeg"
	"math"
	"sync/atomic"
	"time"

	"github.com/chromedp/cdproto/cdp"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/chromedp/cdproto/page"

	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

const defaultQuality = 80

// A resize is followed up. On a surface-size change Chromium's capturer
// drops the frame it took, takes the new size and counts on a refresh
// frame (content/browser/devtools/protocol/page_handler.cc); on a loaded
// machine that sometimes never comes, and a page at rest then shows its
// old size until it changes (seen in CI at render scale 0.5, where no
// sharp frame at rest covers it). Without a frame of the new size within
// resizeGrace, the screencast restarts, as a start sends the page as it
// is; up to resizeRestarts times, each wait twice the one before.
const (
	resizeGrace    = 300 * time.Millisecond
	resizeRestarts = 3
)

// screencaster streams the page's frames; one screencast runs at a time.
type screencaster struct {
	b             *cbrowser
	screencasting atomic.Bool
	frameSeq      atomic.Uint64
	// loseFrame, when set (tests), drops the frames it returns true for,
	// as Chromium's capturer may after a resize.
	loseFrame func(browser.Frame) bool
	// pageScale is the page scale factor of the running screencast's last
	// frame (float64 bits; 0 = no frame yet): what the viewers see, which
	// their pointer positions are in (screen.toPage).
	pageScale atomic.Uint64
}

// Screencast implements browser.Browser.
func (s *screencaster) Screencast(ctx context.Context, opts browser.ScreencastOptions, sink func(browser.Frame)) error {
	b := s.b
	if b.isDone() {
		return b.Err()
	}
	if !s.screencasting.CompareAndSwap(false, true) {
		return browser.ErrBusy
	}
	defer s.screencasting.Store(false)
	s.pageScale.Store(0)
	defer s.pageScale.Store(0) // no frames to tell it any more
	cctx, cancel, err := b.call(ctx)
	if err != nil {
		return err
	}
	defer cancel()

	quality := int64(opts.Quality)
	if quality <= 0 || quality > 100 {
		quality = defaultQuality
	}
	// maxW, maxH follow the viewport's device pixels unless opts fixes
	// them; a resize before this start needs no follow-up, the start reads
	// the size. A window that could not go to its screen while the page
	// rested goes now.
	b.placeWindow(cctx)
	select {
	case <-b.resized:
	default:
	}
	b.mu.Lock()
	maxW, maxH := opts.MaxWidth, opts.MaxHeight
	dw, dh := b.devicePixels()
	config.OrDefault(&maxW, dw)
	config.OrDefault(&maxH, dh)
	castScale := b.frameScale
	b.mu.Unlock()

	// Subscribe before starting, so the first frame cannot be missed.
	events, unsubscribe := endWith(cctx, b.t).Subscribe(page.ScreencastFrame.Method)
	defer unsubscribe()
	var cur browser.Grade // of the running screencast; Scale 0 = not started
	// sharpens: a page at rest shown by a scaled-down frame gets a sharp
	// one. Not when Chromium draws small (Config.RenderScale): a sharp
	// frame is a screenshot, which takes the page's emulated size off for
	// a moment, and the screencast frames around it show the page at the
	// screen's size.
	sharpens := opts.Sharpen > 0 && b.rt.scale == 1
	start := func(g browser.Grade) error {
		if cur.Scale != 0 {
			if _, err := pageCall(cctx, b, page.StopScreencast, cdp.Empty{}); err != nil {
				return err
			}
		}
		cur = g
		// The grade scales what Chromium draws, which is the page's size
		// times the render scale.
		scale := g.Scale * b.rt.scale
		q := int64(g.Quality)
		_, err := pageCall(cctx, b, page.StartScreencast, page.StartScreencastParams{
			Format:        page.StartScreencastFormatJpeg,
			Quality:       &q,
			MaxWidth:      max(1, int64(math.Round(float64(maxW)*scale))),
			MaxHeight:     max(1, int64(math.Round(float64(maxH)*scale))),
			EveryNthFrame: int64(max(1, opts.EveryNthFrame)),
		})
		return err
	}
	if err := start(gradeOf(opts, quality)); err != nil {
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

	// sharpen fires when a scaled-down frame was the last one for
	// opts.Sharpen; last is that frame, whose metadata the sharp one keeps.
	sharpen := time.NewTimer(time.Hour)
	sharpen.Stop()
	defer sharpen.Stop()
	var last browser.Frame
	// sharpened: the last frame out was a sharp one. Taking it makes
	// Chromium paint the page once more; that frame, byte for byte the
	// scaled one before (same pixels, same encoder), is dropped, or it
	// would blur the page again (and sharpen again, forever).
	sharpened := false
	// ack lets Chromium send the next frame: it sends none until then.
	ack := func(ev page.EventScreencastFrame) error {
		_, err := pageCall(cctx, b, page.ScreencastFrameAck, page.ScreencastFrameAckParams{SessionID: ev.SessionID})
		return err
	}
	// restart starts the screencast again at grade g; the start sends a
	// frame of the page as it is, so no sharp frame is due for the last.
	restart := func(g browser.Grade) error {
		sharpen.Stop()
		sharpened = false
		return start(g)
	}
	// regrade restarts the screencast if its grade changed; the restart
	// sends a frame at the new one.
	regrade := func() (restarted bool, err error) {
		g := gradeOf(opts, quality)
		if g.Scale == cur.Scale && g.Quality == cur.Quality {
			return false, nil
		}
		return true, restart(g)
	}
	// follow fires when a resize (want) has had no frame of its size for
	// the current wait; want.w 0 = none pending.
	follow := time.NewTimer(time.Hour)
	follow.Stop()
	defer follow.Stop()
	var want resizeWant
	for {
		select {
		case <-cctx.Done():
			return s.endScreencast(ctx, nil)
		case <-b.resized:
			b.mu.Lock()
			want = resizeWant{w: b.width, h: b.height}
			w, h := b.devicePixels()
			// A new device pixel ratio: its frames have the old one's
			// CSS size, which resizeWant cannot tell apart, so the
			// restart below sends one.
			rescaled := b.frameScale != castScale
			castScale = b.frameScale
			b.mu.Unlock()
			// Frames larger than the screencast's maximum come scaled
			// down: a viewport that grew past it needs a new one. So does
			// one that shrank under a scaled screencast, whose maximum,
			// not the grade, would size its frames: larger than graded
			// (a viewer's slow link then never got one it could take).
			grew, shrank := false, false
			if opts.MaxWidth == 0 {
				grew, shrank = grew || w > maxW, shrank || w < maxW
				maxW = w
			}
			if opts.MaxHeight == 0 {
				grew, shrank = grew || h > maxH, shrank || h < maxH
				maxH = h
			}
			if grew || (shrank && cur.Scale*b.rt.scale < 1) || rescaled {
				if err := restart(cur); err != nil {
					return s.endScreencast(ctx, err)
				}
			}
			follow.Reset(resizeGrace)
			continue
		case <-follow.C:
			if want.w == 0 || b.resting.Load() {
				want = resizeWant{} // a hidden page paints nothing; waking it paints
				continue
			}
			if want.restarts == resizeRestarts {
				b.log.Warn().Int("width", want.w).Int("height", want.h).Int("restarts", want.restarts).
					Msg("no screencast frame of the new size")
				want = resizeWant{}
				continue
			}
			want.restarts++
			b.rt.resizeRestarts.Add(1)
			b.log.Debug().Int("width", want.w).Int("height", want.h).Int("restart", want.restarts).
				Msg("no screencast frame of the new size yet: restarting the screencast")
			if err := restart(cur); err != nil {
				return s.endScreencast(ctx, err)
			}
			follow.Reset(resizeGrace << want.restarts)
			continue
		case <-opts.Refresh:
			if _, err := regrade(); err != nil {
				return s.endScreencast(ctx, err)
			}
			continue
		case <-sharpen.C:
			if f, ok := s.sharpFrame(cctx, last, int64(cur.Quality)); ok {
				sink(f)
				sharpened = true
			}
			continue
		case raw, ok := <-events:
			if !ok {
				return s.endScreencast(ctx, nil)
			}
			var ev page.EventScreencastFrame
			if err := jsonv2.Unmarshal(raw, &ev); err != nil {
				return b.fail("screencast frame", err)
			}
			sharpen.Stop()
			if sharpened && bytes.Equal(ev.Data, last.Data) {
				sharpened = false
				if err := ack(ev); err != nil {
					return s.endScreencast(ctx, err)
				}
				continue
			}
			sharpened = false
			// A new grade: this frame has the old one (a frame too large for
			// a viewer's link must not reach it); the restart sends one.
			restarted, err := regrade()
			if err != nil {
				return s.endScreencast(ctx, err)
			}
			if restarted {
				continue
			}
			f := s.frame(ev)
			if s.loseFrame != nil && s.loseFrame(f) {
				if err := ack(ev); err != nil {
					return s.endScreencast(ctx, err)
				}
				continue
			}
			last = f
			sink(last)
			// A resting page's window moves to its screen once it paints.
			b.placeWindow(cctx)
			if want.w != 0 && want.shows(last) {
				want = resizeWant{}
				follow.Stop()
			}
			if err := ack(ev); err != nil {
				return s.endScreencast(ctx, err)
			}
			if sharpens && cur.Scale < 1 && cur.Sharpen {
				sharpen.Reset(opts.Sharpen)
			}
		}
	}
}

// resizeWant is a resize a screencast follows up: the viewport's new size
// in CSS pixels and the restarts made for it so far.
type resizeWant struct {
	w, h, restarts int
}

// shows reports whether f is a frame of the wanted size. Under a render
// scale the page's size rounds to whole device pixels (a 999-pixel
// viewport at 0.5 is a 1000-pixel page), hence the slack. Its image must
// have the page's shape too: Chromium may send the new size's metadata
// with the old size's picture (933x700 for a 1000x700 page that was
// 800x600), which is no frame of the new size.
func (r resizeWant) shows(f browser.Frame) bool {
	if math.Abs(f.DeviceWidth-float64(r.w)) > 2 || math.Abs(f.DeviceHeight-float64(r.h)) > 2 {
		return false
	}
	// Width/Height = DeviceWidth/DeviceHeight, give or take a pixel of
	// rounding on each side of the image.
	skew := float64(f.Width)*f.DeviceHeight - float64(f.Height)*f.DeviceWidth
	return math.Abs(skew) <= f.DeviceWidth+f.DeviceHeight
}

// endScreencast is Screencast's result once its frames stop: the caller's
// context ended, the page went away, or a command failed (cause) on a page
// still there, which the caller may start again.
func (s *screencaster) endScreencast(ctx context.Context, cause error) error {
	b := s.b
	if err := ctx.Err(); err != nil {
		return err
	}
	if cause == nil || b.ctx.Err() != nil {
		return b.fail("screencast", browser.ErrClosed)
	}
	return fmt.Errorf("chromium: screencast: %w", cause)
}

// gradeOf is opts' grade now: Scale within (0, 1], Quality within 1..100
// (quality, the screencast's, if unset).
func gradeOf(opts browser.ScreencastOptions, quality int64) browser.Grade {
	g := browser.Grade{Scale: 1, Quality: int(quality)}
	if opts.Grade == nil {
		return g
	}
	got := opts.Grade()
	if got.Scale > 0 && got.Scale <= 1 { // also not NaN
		g.Scale = got.Scale
	}
	if got.Quality > 0 && got.Quality <= 100 {
		g.Quality = got.Quality
	}
	g.Sharpen = got.Sharpen
	return g
}

// sharpFrame is the page as it is at full size: a screenshot with the
// metadata of last, the scaled-down frame it replaces (the page has not
// changed since, or a newer frame would have come). Any frame Chromium
// paints meanwhile waits in the subscription and follows it.
func (s *screencaster) sharpFrame(ctx context.Context, last browser.Frame, quality int64) (browser.Frame, bool) {
	b := s.b
	res, err := pageCall(ctx, b, page.CaptureScreenshot, page.CaptureScreenshotParams{
		Format: page.CaptureScreenshotFormatJpeg, Quality: &quality, OptimizeForSpeed: new(true)})
	if err != nil {
		b.log.Debug().Err(err).Msg("sharp frame")
		return browser.Frame{}, false
	}
	f := last
	f.Data, f.Seq, f.Timestamp = res.Data, s.frameSeq.Add(1), time.Now()
	if cfg, err := jpeg.DecodeConfig(bytes.NewReader(res.Data)); err == nil {
		f.Width, f.Height = cfg.Width, cfg.Height
	}
	return f, true
}

// frame converts a CDP frame.
func (s *screencaster) frame(ev page.EventScreencastFrame) browser.Frame {
	f := browser.Frame{Data: ev.Data, Seq: s.frameSeq.Add(1), Timestamp: time.Now()}
	if cfg, err := jpeg.DecodeConfig(bytes.NewReader(ev.Data)); err == nil {
		f.Width, f.Height = cfg.Width, cfg.Height
	}
	if m := ev.Metadata; m != nil {
		if m.PageScaleFactor > 0 {
			s.pageScale.Store(math.Float64bits(m.PageScaleFactor))
		}
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
