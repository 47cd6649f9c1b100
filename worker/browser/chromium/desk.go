package chromium

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium/pagescript"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/feed"
)

// The desk: what a person's own browser does for a page besides showing
// it, reported by the page script pagescript.Desk. window.print() becomes
// a PDF download; a permission the page asks for becomes one of its
// dialogs (kind permission), answered by Browser.setPermission for the top
// document's origin; focus moves say whether a text field is focused.

// printTimeout bounds rendering a page as PDF.
const printTimeout = time.Minute

// deskMsg is one report of the desk script.
type deskMsg struct {
	Print    *string `json:"print"`
	Ask      string  `json:"ask"`
	Editable *bool   `json:"editable"`
}

// desk is the part of cbrowser that hears the desk script.
type desk struct {
	editable feed.Feed[bool]
}

// OnEditable implements browser.Browser.
func (d *desk) OnEditable(fn func(bool)) (stop func()) { return d.editable.Subscribe(fn) }

// setupDesk installs the desk script in the page's documents.
func (b *cbrowser) setupDesk(ctx context.Context) error {
	b.editable.Init(func(v bool, fns []func(bool)) { deliver(b, v, fns) })
	context.AfterFunc(b.ctx, func() { b.editable.End(); b.copies.End() })
	if _, err := pageCall(ctx, b, runtime.AddBinding, runtime.AddBindingParams{Name: pagescript.DeskBinding}); err != nil {
		return fmt.Errorf("desk binding: %w", err)
	}
	if _, err := pageCall(ctx, b, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: pagescript.Desk}); err != nil {
		return fmt.Errorf("desk script: %w", err)
	}
	return nil
}

// deskCall handles one report on chromedp's reader goroutine: it records
// and posts, and any CDP work runs on a goroutine of its own.
func (b *cbrowser) deskCall(payload string) {
	var m deskMsg
	if len(payload) > 4096 || json.Unmarshal([]byte(payload), &m) != nil {
		return
	}
	switch {
	case m.Print != nil:
		b.printed(*m.Print)
	case m.Ask != "":
		b.mu.Lock()
		top := b.page.URL
		b.mu.Unlock()
		b.perms.ask(m.Ask, top)
	case m.Editable != nil:
		on := *m.Editable
		b.editable.Post(on, func(bool) bool { return true })
	}
}

// printed renders the page as a PDF into the downloads folder and reports
// it as a download named for the page's title. With downloads refused,
// printing does nothing, as on a computer with no printer.
func (f *fileTransfers) printed(title string) {
	f.ftMu.Lock()
	dir := f.downloadDir
	f.ftMu.Unlock()
	if dir == "" {
		return
	}
	b := f.owner
	b.rt.track(func() {
		ctx, cancel := context.WithTimeout(b.ctx, printTimeout)
		defer cancel()
		d, err := f.printPDF(ctx, dir, title)
		if err != nil {
			b.log.Info().Err(err).Msg("window.print: no PDF")
			return
		}
		f.downloads.Post(d, nil)
	})
}

func (f *fileTransfers) printPDF(ctx context.Context, dir, title string) (browser.Download, error) {
	b := f.owner
	var raw [12]byte
	_, _ = rand.Read(raw[:])
	d := browser.Download{ID: "print-" + hex.EncodeToString(raw[:]), Name: pdfName(title), State: browser.DownloadInProgress}
	b.mu.Lock()
	d.URL = clipURL(b.page.URL)
	b.mu.Unlock()
	f.downloads.Post(d, nil)
	res, err := pageCall(ctx, b, page.PrintToPDF, page.PrintToPDFParams{PrintBackground: new(true)})
	if err == nil {
		d.Path = filepath.Join(dir, d.ID)
		err = os.WriteFile(d.Path, res.Data, 0o600)
	}
	if err != nil {
		d.State = browser.DownloadCanceled
		f.downloads.Post(d, nil)
		return d, fmt.Errorf("chromium: print: %w", err)
	}
	d.Total, d.Received, d.State = int64(len(res.Data)), int64(len(res.Data)), browser.DownloadCompleted
	return d, nil
}

// pdfName is the file name of a printed page.
func pdfName(title string) string {
	name := strings.Map(func(r rune) rune {
		if r < 0x20 || strings.ContainsRune(`/\:*?"<>|`, r) {
			return '_'
		}
		return r
	}, strings.TrimSpace(title))
	if name == "" {
		name = "page"
	}
	return name + ".pdf"
}

// CancelDownload implements browser.Browser.
func (f *fileTransfers) CancelDownload(ctx context.Context, id string) error {
	f.ftMu.Lock()
	_, ok := f.inFlight[id]
	f.ftMu.Unlock()
	if !ok {
		return browser.ErrNoDownload
	}
	b := f.owner
	cctx, cancel, err := b.call(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if _, err := cdp.Call(cctx, b.p.browser, cdpbrowser.CancelDownload, cdpbrowser.CancelDownloadParams{GUID: id, BrowserContextID: b.contextID}); err != nil {
		return b.fail("cancel download", err)
	}
	return nil
}

// askable are the permissions a page may ask its user for.
var askable = map[string]bool{
	browser.PermissionGeolocation: true, browser.PermissionNotifications: true,
	browser.PermissionCamera: true, browser.PermissionMicrophone: true,
}

// permAsks are the page's permission requests, asked one at a time.
type permAsks struct {
	b       *cbrowser
	prompts browser.Prompts

	mu    sync.Mutex
	open  *permAsk
	queue []permAsk
}

type permAsk struct{ name, origin string }

// ask queues a request for permission name by the page whose top document
// is at top. A permission is set for the top document's origin (frames of
// another origin do not ask; the page script lets Chromium refuse them).
func (p *permAsks) ask(name, top string) {
	u, err := url.Parse(top)
	if !askable[name] || err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return
	}
	a := permAsk{name: name, origin: u.Scheme + "://" + u.Host}
	p.mu.Lock()
	if (p.open != nil && *p.open == a) || containsAsk(p.queue, a) {
		p.mu.Unlock()
		return
	}
	if p.open != nil {
		p.queue = append(p.queue, a)
		p.mu.Unlock()
		return
	}
	p.open = &a
	p.mu.Unlock()
	p.prompts.Opened(browser.PromptPermission, a.name, "", a.origin)
}

func containsAsk(q []permAsk, a permAsk) bool {
	for _, x := range q {
		if x == a {
			return true
		}
	}
	return false
}

// answer sets the open request's permission as the user answered, then
// asks the next one.
func (p *permAsks) answer(ctx context.Context, ans browser.PromptAnswer) error {
	p.mu.Lock()
	a := p.open
	p.mu.Unlock()
	if a == nil {
		return browser.ErrNoPrompt
	}
	b := p.b
	cctx, cancel, err := b.call(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	setting := cdpbrowser.PermissionSettingDenied
	if ans.Accept {
		setting = cdpbrowser.PermissionSettingGranted
		if a.name == browser.PermissionGeolocation {
			// Before the grant, so the page's waiting call sees where
			// its user is (no position: "unavailable").
			geo := emulation.SetGeolocationOverrideParams{}
			if pos := ans.Position; pos != nil {
				geo.Latitude, geo.Longitude, geo.Accuracy = &pos.Latitude, &pos.Longitude, &pos.Accuracy
			}
			if _, err := pageCall(cctx, b, emulation.SetGeolocationOverride, geo); err != nil {
				return b.fail("geolocation", err)
			}
		}
	}
	if _, err := cdp.Call(cctx, b.p.browser, cdpbrowser.SetPermission, cdpbrowser.SetPermissionParams{
		Permission: &cdpbrowser.PermissionDescriptor{Name: a.name}, Setting: setting,
		Origin: a.origin, BrowserContextID: b.contextID,
	}); err != nil {
		return b.fail("permission", err)
	}
	p.prompts.Closed(ans.Accept)
	p.mu.Lock()
	p.open = nil
	var next *permAsk
	if len(p.queue) > 0 {
		n := p.queue[0]
		next, p.queue = &n, p.queue[1:]
		p.open = next
	}
	p.mu.Unlock()
	if next != nil {
		p.prompts.Opened(browser.PromptPermission, next.name, "", next.origin)
	}
	return nil
}
