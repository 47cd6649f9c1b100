package chromium

import (
	"context"
	"fmt"
	"path/filepath"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/target"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// Downloads. Browser.setDownloadBehavior (allowAndName: each file is named
// by its guid) saves a browser context's downloads in a folder, and
// Browser.downloadWillBegin and Browser.downloadProgress report them on the
// browser session (chromedp.ListenBrowser keeps their order; two
// subscriptions would not: a progress may come before its begin). That
// session is shared by every browser
// context of the Chromium, so each browser claims the downloads of its own
// frames: its page's main frame (whose id is the page's target id), the
// page's subframes (Page.frameAttached) and its context's other pages
// (popups: Target.targetCreated), and then their guids.
//
// The page session's Page.downloadWillBegin and Page.downloadProgress
// would need no claiming, and Chromium 156 still sends them, but they are
// deprecated, gone from cdproto (so chromedp's listeners never see them),
// and miss the downloads of popups, which open a page of their own.
//
// Whether the browser session gets the events at all is one setting of
// that session, not of a context: every call passes eventsEnabled, or one
// browser refusing downloads would silence everybody else's.

// maxDownloadURL bounds Download.URL: a data: URL holds the whole file.
const maxDownloadURL = 2048

// download is one of the browser's downloads in progress.
type download struct {
	browser.Download
	dir string // where it is saved
}

// downloadBehavior is the setting that saves b's downloads in dir; ""
// refuses them.
func downloadBehavior(b *cbrowser, dir string) cdpbrowser.SetDownloadBehaviorParams {
	p := cdpbrowser.SetDownloadBehaviorParams{
		Behavior:         cdpbrowser.SetDownloadBehaviorBehaviorDeny,
		BrowserContextID: b.contextID,
		EventsEnabled:    new(true),
	}
	if dir != "" {
		p.Behavior, p.DownloadPath = cdpbrowser.SetDownloadBehaviorBehaviorAllowAndName, dir
	}
	return p
}

// SetDownloads implements browser.Browser.
func (f *fileTransfers) SetDownloads(ctx context.Context, dir string) error {
	b := f.owner
	if dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return fmt.Errorf("chromium: downloads: %w", err)
		}
		dir = abs
	}
	f.dirMu.Lock()
	defer f.dirMu.Unlock()
	cctx, cancel, err := b.call(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	// Claimed before Chromium saves any (their events may beat the
	// answer), refused ones after it saves no more.
	f.ftMu.Lock()
	old := f.downloadDir
	if dir != "" {
		f.downloadDir = dir
	}
	f.ftMu.Unlock()
	if _, err := cdp.Call(cctx, b.p.browser, cdpbrowser.SetDownloadBehavior, downloadBehavior(b, dir)); err != nil {
		f.ftMu.Lock()
		f.downloadDir = old
		f.ftMu.Unlock()
		return b.fail("downloads", err)
	}
	f.ftMu.Lock()
	f.downloadDir = dir
	f.ftMu.Unlock()
	return nil
}

// OnDownload implements browser.Browser.
func (f *fileTransfers) OnDownload(fn func(browser.Download)) (stop func()) {
	return f.downloads.Subscribe(fn)
}

// browserEvent sees the events of the browser session on chromedp's reader
// goroutine: it records and posts only.
func (f *fileTransfers) browserEvent(ev any) {
	switch ev := ev.(type) {
	case *target.EventTargetCreated:
		if ti := ev.TargetInfo; ti.Type == "page" && ti.BrowserContextID == f.owner.contextID {
			f.ownFrame(cdp.FrameID(ti.TargetID), true)
		}
	case *target.EventTargetDestroyed:
		f.ownFrame(cdp.FrameID(ev.TargetID), false)
	case *cdpbrowser.EventDownloadWillBegin:
		f.ftMu.Lock()
		defer f.ftMu.Unlock()
		_, mine := f.ownFrames[ev.FrameID]
		mine = mine || ev.FrameID == cdp.FrameID(f.owner.t.TargetID)
		if !mine || f.downloadDir == "" {
			return
		}
		if f.inFlight == nil {
			f.inFlight = map[string]*download{}
		}
		d := &download{Download: browser.Download{
			ID: ev.GUID, Name: ev.SuggestedFilename, URL: clipURL(ev.URL), State: browser.DownloadInProgress,
		}, dir: f.downloadDir}
		f.inFlight[ev.GUID] = d
		f.downloads.Post(d.Download, nil)
	case *cdpbrowser.EventDownloadProgress:
		f.ftMu.Lock()
		defer f.ftMu.Unlock()
		d, ok := f.inFlight[ev.GUID]
		if !ok {
			return
		}
		d.Total, d.Received, d.State = int64(ev.TotalBytes), int64(ev.ReceivedBytes), browser.DownloadState(ev.State)
		if d.State != browser.DownloadInProgress {
			delete(f.inFlight, ev.GUID)
		}
		if d.State == browser.DownloadCompleted {
			d.Path = ev.FilePath
			if d.Path == "" {
				d.Path = filepath.Join(d.dir, ev.GUID)
			}
		}
		// A progress not yet delivered is stale once the next one comes.
		f.downloads.Post(d.Download, func(last browser.Download) bool {
			return last.ID == d.ID && last.State == browser.DownloadInProgress && d.State == browser.DownloadInProgress
		})
	}
}

// ownFrame adds (or removes) a frame whose downloads are this browser's.
func (f *fileTransfers) ownFrame(id cdp.FrameID, own bool) {
	f.ftMu.Lock()
	defer f.ftMu.Unlock()
	if !own {
		delete(f.ownFrames, id)
		return
	}
	if f.ownFrames == nil {
		f.ownFrames = map[cdp.FrameID]struct{}{}
	}
	f.ownFrames[id] = struct{}{}
}

// clipURL cuts u to maxDownloadURL bytes on a rune boundary.
func clipURL(u string) string {
	if len(u) <= maxDownloadURL {
		return u
	}
	i := maxDownloadURL
	for i > 0 && u[i]&0xC0 == 0x80 {
		i--
	}
	return u[:i]
}
