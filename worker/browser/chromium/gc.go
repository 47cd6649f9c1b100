package chromium

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/heapprofiler"
	"github.com/chromedp/cdproto/memory"
)

// Renderer garbage (see docs/chromium.md, "Long-lived browsers").
//
// A renderer keeps every document it ever had in Blink's heap until a major
// garbage collection, and V8 schedules those by its own heap, which dead
// documents hardly grow (their cost is in Blink objects and native memory):
// a renderer that only navigates went 20-40 loads of a page with 50 SVG
// images (2000+ dead documents) without one, and none came in 20 s idle.
// Dead documents are not free meanwhile. Every SVG image is an isolated
// document with an agent of its own, and after every task Blink's
// scheduler runs a microtask checkpoint over all agents of the renderer,
// dead-but-uncollected ones included (and those of back-forward-cached
// pages: see disabledFeatures); that checkpoint alone grew from 35
// to 150 us per task. Loads of that page went from ~200 ms to 0.5-2 s and
// the renderer from 150 to 650 MB RSS.
//
// So after each load of the top document (and each same-document
// navigation) the browser reads the renderer's document count
// (Memory.getDOMCounters, a few counters) and, when the documents that
// appeared since the last collection outnumber the ones that survived it
// and are at least defaultMinGarbageDocs, asks for a full collection
// (HeapProfiler.collectGarbage: V8's LowMemoryNotification, which also
// collects Blink's heap). Like a heap that grows by a factor before it
// collects, that keeps the garbage at most about the live set and the
// collections' cost in proportion to the documents created. Pages that
// create few documents are never collected by it.
//
// The check reads the counters of the page's main renderer only: the
// garbage of out-of-process (cross-site) iframes is left to Chromium.

// defaultMinGarbageDocs is the least number of new documents that triggers
// a collection, so pages that create few documents are not collected for
// nothing. A page with 50 SVG images creates 51 documents per load.
const defaultMinGarbageDocs = 256

// gcCheckTimeout bounds one check, collection included.
const gcCheckTimeout = 30 * time.Second

// gcWatch asks the renderer to collect its garbage when dead documents
// pile up.
type gcWatch struct {
	b    *cbrowser
	wake chan struct{} // the page loaded: check the renderer's garbage (cap 1)
	gcs  atomic.Uint64 // renderer garbage collections asked for
}

// loaded tells gcLoop that the page loaded a document or moved within
// one, the moments dead documents pile up.
func (g *gcWatch) loaded() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// gcLoop checks the renderer's garbage whenever the page loaded, until the
// browser is done.
func (g *gcWatch) gcLoop(minGarbage int64) {
	b := g.b
	defer b.rt.wg.Done()
	base := int64(-1) // documents after the last collection; -1 = not known yet
	for {
		select {
		case <-b.done:
			return
		case <-g.wake:
		}
		base = g.collectGarbage(base, minGarbage)
	}
}

// collectGarbage collects the renderer's garbage if enough documents
// appeared since base, and returns the new base.
func (g *gcWatch) collectGarbage(base, minGarbage int64) int64 {
	b := g.b
	ctx, cancel := context.WithTimeout(b.ctx, gcCheckTimeout)
	defer cancel()
	c, err := pageCall(ctx, b, memory.GetDOMCounters, cdp.Empty{})
	if err != nil {
		b.log.Debug().Err(err).Msg("renderer gc: document count")
		return base
	}
	docs := c.Documents
	// Fewer documents than the base: Chromium collected by itself, or the
	// page moved to another renderer (cross-site navigation).
	if base < 0 || docs < base {
		return docs
	}
	if docs-base < max(base, minGarbage) {
		return base
	}
	t0 := time.Now()
	if _, err := pageCall(ctx, b, heapprofiler.CollectGarbage, cdp.Empty{}); err != nil {
		b.log.Debug().Err(err).Msg("renderer gc")
		return base
	}
	took := time.Since(t0)
	g.gcs.Add(1)
	c, err = pageCall(ctx, b, memory.GetDOMCounters, cdp.Empty{})
	if err != nil {
		b.log.Debug().Err(err).Msg("renderer gc: document count")
		return base
	}
	b.log.Debug().Int64("documents", docs).Int64("live", c.Documents).Dur("took", took).Msg("renderer gc")
	return c.Documents
}
