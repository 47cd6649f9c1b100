// Package browser is the worker's virtual-browser layer: the interface the
// rest of the worker uses, independent of how pages are rendered. The
// Chromium implementation lives in the chromium subpackage; Null is an
// honest placeholder that keeps page state but renders nothing, for tests of
// the cluster backbone and for workers started with --runtime none.
package browser

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// Options describe a new virtual browser.
type Options struct {
	// URL is loaded first ("" = about:blank).
	URL string
	// Width and Height of the viewport in CSS pixels (0 = 1280x800).
	Width, Height int
}

// Page is what a virtual browser currently shows.
type Page struct {
	URL   string
	Title string
}

// Stats describe a runtime's resource use for load reports.
type Stats struct {
	Browsers  int
	Processes int    // OS processes (Chromium main + children)
	PSS       uint64 // bytes, proportional set size of all processes
}

// ErrClosed is returned by operations on a closed browser or runtime.
var ErrClosed = errors.New("browser: closed")

// ErrCrashed marks a browser whose renderer or Chromium process died.
var ErrCrashed = errors.New("browser: crashed")

// Browser is one isolated virtual browser (in Chromium: a browser context
// with one page target).
type Browser interface {
	// Page returns the current URL and title.
	Page() Page
	// Navigate loads url and waits for it to commit.
	Navigate(ctx context.Context, url string) error
	// Done is closed when the browser is closed or crashed; Err says which.
	Done() <-chan struct{}
	Err() error
	// Close disposes the browser; it is idempotent.
	Close(ctx context.Context) error
}

// Runtime creates virtual browsers.
type Runtime interface {
	// Name identifies the implementation in logs and status ("chromium", "none").
	Name() string
	NewBrowser(ctx context.Context, opts Options) (Browser, error)
	Stats(ctx context.Context) (Stats, error)
	// Close closes every browser and stops the runtime's processes.
	Close() error
}

// Null is a Runtime whose browsers remember their URL but render nothing.
type Null struct {
	n      atomic.Int64
	closed atomic.Bool
}

// Name implements Runtime.
func (r *Null) Name() string { return "none" }

// NewBrowser implements Runtime.
func (r *Null) NewBrowser(ctx context.Context, opts Options) (Browser, error) {
	if r.closed.Load() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r.n.Add(1)
	b := &nullBrowser{rt: r, done: make(chan struct{})}
	b.page.URL = opts.URL
	if b.page.URL == "" {
		b.page.URL = "about:blank"
	}
	return b, nil
}

// Stats implements Runtime.
func (r *Null) Stats(context.Context) (Stats, error) {
	return Stats{Browsers: int(r.n.Load())}, nil
}

// Close implements Runtime.
func (r *Null) Close() error { r.closed.Store(true); return nil }

type nullBrowser struct {
	rt   *Null
	mu   sync.Mutex
	page Page
	once sync.Once
	done chan struct{}
}

func (b *nullBrowser) Page() Page { b.mu.Lock(); defer b.mu.Unlock(); return b.page }

func (b *nullBrowser) Navigate(ctx context.Context, url string) error {
	select {
	case <-b.done:
		return ErrClosed
	default:
	}
	b.mu.Lock()
	b.page = Page{URL: url}
	b.mu.Unlock()
	return nil
}

func (b *nullBrowser) Done() <-chan struct{} { return b.done }

func (b *nullBrowser) Err() error {
	select {
	case <-b.done:
		return ErrClosed
	default:
		return nil
	}
}

func (b *nullBrowser) Close(context.Context) error {
	b.once.Do(func() { b.rt.n.Add(-1); close(b.done) })
	return nil
}
