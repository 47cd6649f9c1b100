// Package grade decides how large a worker's screencast frames are. A
// frame's cost to Chromium grows with its size (readback, scaling, JPEG:
// scripts/bench/cmd/framecost measures a half-size frame at ~0.6 of a
// full one), so a worker short of CPU sends smaller frames rather than
// later ones, as video calls lower their resolution under CPU overuse.
//
// The signal is what users feel: input→frame latency inside the worker
// (an input event handed to the browser → the next frame from it). Over
// each window its 90th percentile either exceeds High (one step smaller),
// stays under Low for Recover windows (one step larger), or holds. A page
// at rest is then shown sharp again by the screencast (Sharpen), so
// grading costs a reader nothing.
package grade

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
)

// Config tunes a Governor. Zero values pick the defaults.
type Config struct {
	// High is the latency (p90 over a window) above which frames get one
	// step smaller.
	High time.Duration
	// Low is the latency under which, held for Recover windows, frames get
	// one step larger. It must be below High.
	Low time.Duration
	// MinScale is the smallest frame scale, 0 < MinScale ≤ 1; 1 turns
	// grading off. Steps are 0.25 apart, ending at MinScale.
	MinScale float64
	// Window is how long samples are gathered per decision.
	Window time.Duration
	// Recover is how many calm windows in a row make frames larger.
	Recover int
	// MinSamples is the fewest samples a window needs to make frames
	// smaller; a window with fewer counts as calm.
	MinSamples int
	// Sharpen is how long a page shown by a scaled-down frame rests before
	// a full-size frame shows it sharp (browser.ScreencastOptions.Sharpen):
	// longer than the pause between keys, short enough to look instant.
	Sharpen time.Duration
	// Clock is the time source (tests drive it).
	Clock clock.Clock
}

// DefaultConfig is the Config the worker runs with unless told otherwise.
func DefaultConfig() Config {
	return Config{High: 50 * time.Millisecond, Low: 25 * time.Millisecond, MinScale: 0.5,
		Window: time.Second, Recover: 3, MinSamples: 5, Sharpen: 400 * time.Millisecond, Clock: clock.Real}
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	config.OrDefault(&c.High, d.High)
	config.OrDefault(&c.Low, d.Low)
	config.OrDefault(&c.MinScale, d.MinScale)
	config.OrDefault(&c.Window, d.Window)
	config.OrDefault(&c.Recover, d.Recover)
	config.OrDefault(&c.MinSamples, d.MinSamples)
	config.OrDefault(&c.Sharpen, d.Sharpen)
	if c.Clock == nil {
		c.Clock = d.Clock
	}
	return c
}

// Validate reports the first bad field (after defaults).
func (c Config) Validate() error {
	switch {
	case math.IsNaN(c.MinScale) || c.MinScale < 0 || c.MinScale > 1:
		return config.Errorf("MinScale", "%v is not in (0, 1]", c.MinScale)
	case c.High < 0:
		return config.Errorf("High", "%v is negative", c.High)
	case c.Low < 0:
		return config.Errorf("Low", "%v is negative", c.Low)
	case c.Window < 0:
		return config.Errorf("Window", "%v is negative", c.Window)
	case c.Sharpen < 0:
		return config.Errorf("Sharpen", "%v is negative", c.Sharpen)
	}
	c = c.withDefaults()
	switch {
	case c.Low >= c.High:
		return config.Errorf("Low", "%v must be below the high latency limit, %v", c.Low, c.High)
	}
	return nil
}

// Governor holds a worker's frame scale. It is safe for concurrent use.
type Governor struct {
	cfg    Config
	scales []float64 // by level: 1, 0.75, ..., MinScale

	mu      sync.Mutex
	level   int
	calm    int // calm windows in a row
	start   time.Time
	samples []time.Duration
	// recover is how many calm windows the next step up needs: Recover,
	// doubled each time a step up was undone within backoffWindows (a
	// worker at its limit would otherwise swing between sizes, and each
	// swing restarts every screencast at once: a burst of frames).
	recover int
	sinceUp int // windows since the last step up; -1 = none pending
}

// backoffWindows: a step down this soon after a step up undoes it.
// forgiveWindows: a step up that held this long resets recover.
const (
	backoffWindows = 10
	forgiveWindows = 60
	maxRecover     = 64
)

// New returns a Governor at full size.
func New(cfg Config) (*Governor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("grade: %w", err)
	}
	cfg = cfg.withDefaults()
	scales := []float64{1}
	for s := 0.75; s > cfg.MinScale+1e-9; s -= 0.25 {
		scales = append(scales, s)
	}
	if cfg.MinScale < 1 {
		scales = append(scales, cfg.MinScale)
	}
	return &Governor{cfg: cfg, scales: scales, start: cfg.Clock.Now(), recover: cfg.Recover, sinceUp: -1}, nil
}

// Scale is the factor frames are scaled by now, in (0, 1]. It is cheap:
// screencasts ask before every frame.
func (g *Governor) Scale() float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.tickLocked()
	return g.scales[g.level]
}

// Sharpen is Config.Sharpen.
func (g *Governor) Sharpen() time.Duration { return g.cfg.Sharpen }

// Observe records one input→frame latency.
func (g *Governor) Observe(d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.samples = append(g.samples, d)
	g.tickLocked()
}

// tickLocked closes the window if it is over and decides.
func (g *Governor) tickLocked() {
	elapsed := g.cfg.Clock.Now().Sub(g.start)
	if elapsed < g.cfg.Window {
		return
	}
	windows := int(elapsed / g.cfg.Window)
	g.start = g.start.Add(time.Duration(windows) * g.cfg.Window)
	hot, calm := false, true // too few samples count as calm
	if len(g.samples) >= g.cfg.MinSamples {
		p := p90(g.samples)
		hot, calm = p > g.cfg.High, p < g.cfg.Low
	}
	g.samples = g.samples[:0]
	if g.sinceUp >= 0 {
		if g.sinceUp += windows; g.sinceUp > forgiveWindows {
			g.recover, g.sinceUp = g.cfg.Recover, -1
		}
	}
	switch {
	case hot:
		g.calm = 0
		if g.level == len(g.scales)-1 {
			break
		}
		g.level++
		if g.sinceUp >= 0 && g.sinceUp <= backoffWindows {
			g.recover = min(2*g.recover, maxRecover)
		}
		g.sinceUp = -1
	case calm:
		// Windows that passed with no call at all were calm too.
		g.calm += windows
		for g.calm >= g.recover && g.level > 0 {
			g.level--
			g.calm -= g.recover
			g.sinceUp = 0
		}
		if g.level == 0 {
			g.calm = 0
		}
	default:
		g.calm = 0
	}
}

// p90 sorts ds (the window's samples, dropped after) and returns its 90th
// percentile.
func p90(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[(len(ds)*9+9)/10-1]
}
