package worker

import (
	"os"
	"path/filepath"
	"sync"

	"github.com/cloudbrowser-go/cloudbrowser/internal/bundle"
	"github.com/cloudbrowser-go/cloudbrowser/worker/engine"
	"github.com/cloudbrowser-go/cloudbrowser/worker/files"
)

// filesRoot is the folder of the worker's browsers' files (uploads,
// downloads): one per worker process under the system's temporary folder,
// made when a browser first needs it and removed with the worker. Each
// browser's folder in it goes with the browser (package files).
type filesRoot struct {
	once sync.Once
	dir  string
	err  error
}

func (f *filesRoot) get() (string, error) {
	f.once.Do(func() { f.dir, f.err = os.MkdirTemp("", "cloudbrowser-files-") })
	return f.dir, f.err
}

// close removes the folder and whatever is left in it.
func (f *filesRoot) close() {
	f.once.Do(func() {}) // none made from here on
	if f.dir != "" {
		_ = os.RemoveAll(f.dir)
	}
}

// filesOf makes vb's file door as its app's manifest says (package
// engine serves it).
func (bm *browserMaker) filesOf(in *instance, vb *vbrowser) engine.FilesConfig {
	var cfg bundle.Files
	if m := manifestOf(in.app); m != nil {
		cfg = m.Files
	}
	root, err := bm.w.files.get()
	if err == nil {
		var st *files.Store
		if st, err = files.New(files.Config{Dir: filepath.Join(root, vb.id), MaxBytes: cfg.FilesBytes()}); err == nil {
			return engine.FilesConfig{Store: st, NoUploads: cfg.NoUploads, NoDownloads: cfg.NoDownloads}
		}
	}
	bm.w.log.Warn().Err(err).Str("browser", vb.id).Msg("no folder for the browser's files: no uploads or downloads")
	return engine.FilesConfig{}
}
