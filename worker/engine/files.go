package engine

import (
	"context"
	"errors"
	"fmt"
	"mime/multipart"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/files"
)

// Files through the client engine. A file picker the page opens goes to
// the viewer whose gesture opened it, whose own picker chooses the files;
// they come up over HTTP (Files.Upload) into the browser's folder and are
// set on the page's input. Files dropped on the screen go the same way
// (Files.Drop). What the page downloads is saved in the browser's folder
// and shown to every viewer who may drive, with its progress; finished,
// it is fetched from the Browser URL's own path (Files.Open). Read-only
// viewers get none of it.

// Errors of Files, for the HTTP answer.
var (
	ErrUploadsOff   = errors.New("this app does not take files from its users")
	ErrDownloadsOff = errors.New("this app does not let its users download files")
	ErrNoFileDoor   = errors.New("this browser does not exchange files")
)

// FilesConfig is what a hub's browser may exchange as files.
type FilesConfig struct {
	// Store is the browser's folder (nil: no files at all). The hub
	// removes it when it stops following the browser.
	Store       *files.Store
	NoUploads   bool
	NoDownloads bool
}

// progressEvery bounds how often a download's progress goes out.
const progressEvery = 500 * time.Millisecond

// fileTimeout bounds setting files on the page's input.
const fileTimeout = 30 * time.Second

// Files is a hub's side of its browser's files.
type Files struct {
	cfg     FilesConfig
	b       browser.Browser
	g       *gestures
	clk     clock.Clock
	log     zerolog.Logger
	writers func([]byte) // to every viewer who may drive

	mu      sync.Mutex
	sent    map[string]time.Time // when each download's progress last went out
	refused map[string]bool      // downloads stopped for the limit: their end is told already
}

// watch starts following the page's pickers and downloads; stop ends it
// and removes the browser's files (released: the browser lives on in its
// pool, downloading nothing more).
func (f *Files) watch() (stop func(released bool)) {
	if f.cfg.Store == nil {
		return func(bool) {}
	}
	stopPickers := f.b.OnFileChooser(f.chooser)
	stopDownloads := func() {}
	if !f.cfg.NoDownloads {
		stopDownloads = f.b.OnDownload(f.download)
		ctx, cancel := context.WithTimeout(context.Background(), fileTimeout)
		if err := f.b.SetDownloads(ctx, f.cfg.Store.DownloadDir()); err != nil {
			f.log.Warn().Err(err).Msg("downloads not set up")
		}
		cancel()
	}
	return func(released bool) {
		stopPickers()
		stopDownloads()
		if released && !f.cfg.NoDownloads {
			ctx, cancel := context.WithTimeout(context.Background(), fileTimeout)
			if err := f.b.SetDownloads(ctx, ""); err != nil {
				f.log.Debug().Err(err).Msg("downloads not turned off")
			}
			cancel()
		}
		if err := f.cfg.Store.Remove(); err != nil {
			f.log.Warn().Err(err).Msg("browser's files not removed")
		}
	}
}

// chooser hands a picker the page opened to the viewer who opened it; with
// none, or uploads off, the picker gets no file.
func (f *Files) chooser(fc browser.FileChooser) {
	c := f.g.actor()
	switch {
	case c == nil:
		f.log.Debug().Uint64("chooser", fc.ID).Msg("file picker with no viewer's gesture: cancelled")
	case f.cfg.NoUploads:
		c.enqueue(encode(fileChooserMsg{ID: fc.ID, Refused: ErrUploadsOff.Error() + "."}))
	default:
		f.log.Debug().Uint64("chooser", fc.ID).Str("user", c.user).Msg("file picker sent to its viewer")
		c.enqueue(encode(fileChooserMsg{ID: fc.ID, Multiple: fc.Multiple, Accept: fc.Accept, MaxBytes: f.cfg.Store.MaxBytes()}))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), fileTimeout)
	defer cancel()
	_ = f.b.ChooseFiles(ctx, fc.ID, nil)
}

// download shows a download's progress to the viewers who may drive.
func (f *Files) download(d browser.Download) {
	m := downloadMsg{ID: d.ID, Name: d.Name, Total: d.Total, Received: d.Received, State: string(d.State)}
	f.mu.Lock()
	refused := f.refused[d.ID]
	if refused && d.State != browser.DownloadInProgress {
		delete(f.refused, d.ID)
	}
	f.mu.Unlock()
	if refused {
		return
	}
	switch d.State {
	case browser.DownloadInProgress:
		if room := f.cfg.Store.MaxBytes() - f.cfg.Store.Used(); d.Received > room || d.Total > room {
			// Over the limit already (or announced to be): stopped now,
			// not when its last byte is in.
			f.stopDownload(d.ID)
			m.State, m.Error = "refused", refusal(files.ErrTooLarge)
			break
		}
		f.mu.Lock()
		if f.sent == nil {
			f.sent = map[string]time.Time{}
		}
		last, seen := f.sent[d.ID]
		due := !seen || clock.Since(f.clk, last) >= progressEvery
		if due {
			f.sent[d.ID] = f.clk.Now()
		}
		f.mu.Unlock()
		if !due {
			return
		}
	case browser.DownloadCompleted:
		f.forget(d.ID)
		if err := f.cfg.Store.Downloaded(d); err != nil {
			f.log.Info().Err(err).Str("download", d.ID).Msg("download refused")
			m.State, m.Error = "refused", refusal(err)
		}
	default:
		f.forget(d.ID)
	}
	f.writers(encode(m))
}

// stopDownload cancels download id, whose end is then told no more.
func (f *Files) stopDownload(id string) {
	f.forget(id)
	f.mu.Lock()
	if f.refused == nil {
		f.refused = map[string]bool{}
	}
	f.refused[id] = true
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), fileTimeout)
	defer cancel()
	if err := f.b.CancelDownload(ctx, id); err != nil {
		f.log.Info().Err(err).Str("download", id).Msg("download over the limit not cancelled")
	}
}

func (f *Files) forget(id string) {
	f.mu.Lock()
	delete(f.sent, id)
	f.mu.Unlock()
}

// refusal is err as the user reads it.
func refusal(err error) string {
	if errors.Is(err, files.ErrTooLarge) {
		return "The browser's files would pass its limit: this one was not kept."
	}
	return "The file could not be kept."
}

// Upload saves the files of r and sets them on picker id of the page.
func (f *Files) Upload(ctx context.Context, id uint64, r *multipart.Reader) ([]files.Upload, error) {
	return f.upload(r, func(paths []string) error {
		ctx, cancel := context.WithTimeout(ctx, fileTimeout)
		defer cancel()
		return f.b.ChooseFiles(ctx, id, paths)
	})
}

// Drop saves the files of r and drops them on the page at x, y.
func (f *Files) Drop(ctx context.Context, x, y float64, r *multipart.Reader) ([]files.Upload, error) {
	return f.upload(r, func(paths []string) error {
		ctx, cancel := context.WithTimeout(ctx, fileTimeout)
		defer cancel()
		return f.b.DropFiles(ctx, x, y, paths)
	})
}

func (f *Files) upload(r *multipart.Reader, give func(paths []string) error) ([]files.Upload, error) {
	switch {
	case f == nil || f.cfg.Store == nil:
		return nil, ErrNoFileDoor
	case f.cfg.NoUploads:
		return nil, ErrUploadsOff
	}
	ups, err := f.cfg.Store.SaveUploads(r)
	if err != nil {
		return nil, err
	}
	paths := make([]string, len(ups))
	for i, u := range ups {
		paths[i] = u.Path
	}
	if err := give(paths); err != nil {
		f.cfg.Store.Discard(ups)
		return nil, fmt.Errorf("setting the files on the page: %w", err)
	}
	return ups, nil
}

// Limit is the browser's byte limit for its files (0: no files).
func (f *Files) Limit() int64 {
	if f == nil || f.cfg.Store == nil {
		return 0
	}
	return f.cfg.Store.MaxBytes()
}

// DownloadDir is where the browser's downloads are saved ("": none are).
func (f *Files) DownloadDir() string {
	if f == nil || f.cfg.Store == nil || f.cfg.NoDownloads {
		return ""
	}
	return f.cfg.Store.DownloadDir()
}

// Downloads lists the finished downloads kept now, oldest first.
func (f *Files) Downloads() []files.Kept {
	if f.DownloadDir() == "" {
		return nil
	}
	return f.cfg.Store.Downloads()
}

// Open opens the finished download id.
func (f *Files) Open(id string) (*os.File, browser.Download, error) {
	switch {
	case f == nil || f.cfg.Store == nil:
		return nil, browser.Download{}, ErrNoFileDoor
	case f.cfg.NoDownloads:
		return nil, browser.Download{}, ErrDownloadsOff
	}
	return f.cfg.Store.Open(id)
}
