package chromium

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium/pagescript"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/feed"
)

// Files crossing the page's door. File pickers: Page.setInterceptFileChooserDialog
// turns a click on an <input type=file> into Page.fileChooserOpened (a
// headless Chromium has no dialog to show), and DOM.setFileInputFiles
// answers it. Dropped files: Input.dispatchDragEvent with the files. The
// downloads are in downloads.go.

// maxPickers bounds the pickers a browser keeps open: a page may open one
// after another and nobody answer.
const maxPickers = 16

// nodeTimeout bounds the calls on a picker's input that no caller waits
// for: reading its accept attribute, cancelling it when nobody listens.
const nodeTimeout = 10 * time.Second

// fileTransfers is the part of cbrowser that moves files in and out of its
// page: pickers, drops and downloads.
type fileTransfers struct {
	owner *cbrowser // set by setupFiles, before anyone has the browser
	ftMu  sync.Mutex
	// pickers are the open file pickers by ID: the input's node.
	pickers    map[uint64]cdp.BackendNodeID
	lastPicker uint64
	choosers   feed.Feed[browser.FileChooser]

	// ownFrames are the frames whose downloads are this browser's besides
	// its page's main frame: the page's subframes and the other pages
	// (popups) of its browser context.
	ownFrames   map[cdp.FrameID]struct{}
	downloadDir string               // "" refuses downloads
	inFlight    map[string]*download // this browser's downloads by guid
	downloads   feed.Feed[browser.Download]
	dirMu       sync.Mutex // one SetDownloads at a time
}

// setupFiles prepares the page's files when the browser is created.
func (f *fileTransfers) setupFiles(ctx context.Context, b *cbrowser) error {
	f.owner = b
	f.choosers.Init(f.showChooser)
	f.downloads.Init(func(d browser.Download, fns []func(browser.Download)) { deliver(b, d, fns) })
	context.AfterFunc(b.ctx, func() {
		f.choosers.End()
		f.downloads.End()
	})
	if err := chromedp.ListenBrowser(b.ctx, f.browserEvent); err != nil {
		return fmt.Errorf("download events: %w", err)
	}
	if _, err := pageCall(ctx, b, page.SetInterceptFileChooserDialog, page.SetInterceptFileChooserDialogParams{Enabled: true}); err != nil {
		return fmt.Errorf("file chooser: %w", err)
	}
	// Refused until SetDownloads, whatever the binary's default (a full
	// Chromium starts the download and cancels it later).
	if _, err := cdp.Call(ctx, b.p.browser, cdpbrowser.SetDownloadBehavior, downloadBehavior(b, "")); err != nil {
		return fmt.Errorf("downloads: %w", err)
	}
	return nil
}

// fileEvent sees the page's events on chromedp's reader goroutine: it
// records and posts only.
func (f *fileTransfers) fileEvent(ev any) {
	switch ev := ev.(type) {
	case *page.EventFileChooserOpened:
		if ev.BackendNodeID == 0 {
			return // showOpenFilePicker's: Chromium already failed it (AbortError)
		}
		f.ftMu.Lock()
		if f.pickers == nil {
			f.pickers = map[uint64]cdp.BackendNodeID{}
		}
		f.lastPicker++
		id := f.lastPicker
		f.pickers[id] = ev.BackendNodeID
		delete(f.pickers, id-maxPickers)
		f.ftMu.Unlock()
		f.choosers.Post(browser.FileChooser{ID: id, Multiple: ev.Mode == page.FileChooserOpenedModeSelectMultiple}, nil)
	case *page.EventFrameNavigated:
		if ev.Frame.ParentID == "" {
			f.ftMu.Lock()
			clear(f.pickers) // their inputs went with the document
			f.ftMu.Unlock()
		}
	case *page.EventFrameAttached:
		f.ownFrame(ev.FrameID, true)
	case *page.EventFrameDetached:
		// A swap moves the frame to another renderer; it stays ours.
		if ev.Reason == page.FrameDetachedReasonRemove {
			f.ownFrame(ev.FrameID, false)
		}
	}
}

// showChooser delivers a picker on the choosers' goroutine with its input's
// accept attribute, or cancels it when nobody listens.
func (f *fileTransfers) showChooser(fc browser.FileChooser, fns []func(browser.FileChooser)) {
	b := f.owner
	f.ftMu.Lock()
	node, ok := f.pickers[fc.ID]
	if len(fns) == 0 {
		delete(f.pickers, fc.ID)
	}
	f.ftMu.Unlock()
	if !ok {
		return // its document is gone
	}
	ctx, cancel := context.WithTimeout(b.ctx, nodeTimeout)
	defer cancel()
	if len(fns) == 0 {
		if _, err := onNode(ctx, b, node, pagescript.PickerCancel); err != nil {
			b.log.Debug().Err(err).Msg("cancelling a file chooser")
		}
		return
	}
	accept, err := onNode(ctx, b, node, pagescript.PickerAccept)
	if err != nil {
		b.log.Debug().Err(err).Msg("reading a file chooser's accept")
	}
	fc.Accept = accept
	deliver(b, fc, fns)
}

// OnFileChooser implements browser.Browser.
func (f *fileTransfers) OnFileChooser(fn func(browser.FileChooser)) (stop func()) {
	return f.choosers.Subscribe(fn)
}

// ChooseFiles implements browser.Browser.
func (f *fileTransfers) ChooseFiles(ctx context.Context, id uint64, paths []string) error {
	b := f.owner
	if err := b.Err(); err != nil {
		return err
	}
	files, err := localFiles(paths)
	if err != nil {
		return err
	}
	f.ftMu.Lock()
	node, ok := f.pickers[id]
	delete(f.pickers, id) // answered: a second answer finds nothing
	f.ftMu.Unlock()
	if !ok {
		return browser.ErrNoChooser
	}
	cctx, cancel, err := b.call(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if len(files) == 0 {
		_, err = onNode(cctx, b, node, pagescript.PickerCancel)
	} else {
		// The page sees its input and change events, and reads the files.
		_, err = pageCall(cctx, b, dom.SetFileInputFiles, dom.SetFileInputFilesParams{Files: files, BackendNodeID: node})
	}
	if err != nil {
		return b.fail("choose files", err)
	}
	return nil
}

// DropFiles implements browser.Browser.
func (f *fileTransfers) DropFiles(ctx context.Context, x, y float64, paths []string) error {
	b := f.owner
	files, err := localFiles(paths)
	if err != nil || len(files) == 0 {
		return err
	}
	cctx, cancel, err := b.call(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	k := b.toPage(cctx) // the screen's CSS pixels to the page's, as for the mouse
	data := &input.DragData{Items: []*input.DragDataItem{}, Files: files, DragOperationsMask: 1 /* copy */}
	for _, typ := range []input.DispatchDragEventType{input.DispatchDragEventTypeDragEnter, input.DispatchDragEventTypeDragOver, input.DispatchDragEventTypeDrop} {
		if _, err := pageCall(cctx, b, input.DispatchDragEvent, input.DispatchDragEventParams{Type: typ, X: x * k, Y: y * k, Data: data}); err != nil {
			return b.fail("drop files", err)
		}
	}
	return nil
}

// localFiles makes paths absolute and checks each is a file: Chromium takes
// any path, and the page would get an empty, unreadable file for a wrong one.
func localFiles(paths []string) ([]string, error) {
	files := make([]string, 0, len(paths))
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, fmt.Errorf("chromium: %w", err)
		}
		st, err := os.Stat(abs)
		if err != nil {
			return nil, fmt.Errorf("chromium: %w", err)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("chromium: %s is not a file", abs)
		}
		files = append(files, abs)
	}
	return files, nil
}

// onNode calls the JavaScript function fn with this = the node and returns
// its result if it is a string.
func onNode(ctx context.Context, b *cbrowser, node cdp.BackendNodeID, fn string) (string, error) {
	obj, err := pageCall(ctx, b, dom.ResolveNode, dom.ResolveNodeParams{BackendNodeID: node})
	if err != nil {
		return "", err
	}
	if obj.Object == nil || obj.Object.ObjectID == "" {
		return "", errors.New("node not found")
	}
	defer func() {
		_, _ = pageCall(ctx, b, runtime.ReleaseObject, runtime.ReleaseObjectParams{ObjectID: obj.Object.ObjectID})
	}()
	res, err := pageCall(ctx, b, runtime.CallFunctionOn, runtime.CallFunctionOnParams{
		FunctionDeclaration: fn, ObjectID: obj.Object.ObjectID, ReturnByValue: new(true),
	})
	if err != nil {
		return "", err
	}
	if res.ExceptionDetails != nil {
		return "", errors.New(res.ExceptionDetails.Text)
	}
	var s string
	if res.Result != nil && len(res.Result.Value) > 0 {
		_ = json.Unmarshal(res.Result.Value, &s)
	}
	return s, nil
}

// deliver calls fns with v, unless the browser ended.
func deliver[T any](b *cbrowser, v T, fns []func(T)) {
	for _, fn := range fns {
		if b.isDone() {
			return
		}
		fn(v)
	}
}
