package files

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// Downloaded records a download as the browser reports it. A completed
// one counts against the limit: over it, its file goes and ErrTooLarge
// says so. A kept download goes after KeepFor. Reports of other states
// change nothing here.
func (s *Store) Downloaded(d browser.Download) error {
	if d.State != browser.DownloadCompleted {
		return nil
	}
	path, err := s.inDownloads(d.Path)
	if err != nil {
		return err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("files: download %s: %w", d.ID, err)
	}
	d.Name = cleanName(d.Name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.downloads[d.ID]; dup {
		return nil
	}
	if s.removed || s.used+fi.Size() > s.cfg.MaxBytes {
		_ = os.Remove(path)
		return fmt.Errorf("%w (%d MiB): %s", ErrTooLarge, s.cfg.MaxBytes>>20, d.Name)
	}
	s.used += fi.Size()
	dl := &download{d: d, size: fi.Size(), expires: s.cfg.Clock.Now().Add(s.cfg.KeepFor)}
	dl.timer = s.cfg.Clock.AfterFunc(s.cfg.KeepFor, func() { s.expire(d.ID, dl) })
	s.downloads[d.ID] = dl
	return nil
}

// inDownloads checks that path is a file in the downloads folder (the
// browser names it; it never points elsewhere).
func (s *Store) inDownloads(path string) (string, error) {
	if path == "" || filepath.Dir(filepath.Clean(path)) != filepath.Clean(s.DownloadDir()) {
		return "", fmt.Errorf("files: download outside the folder: %q", path)
	}
	return filepath.Clean(path), nil
}

func (s *Store) expire(id string, dl *download) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.downloads[id] != dl {
		return
	}
	delete(s.downloads, id)
	s.used -= dl.size
	_ = os.Remove(dl.d.Path)
}

// Kept is a finished download the Store keeps.
type Kept struct {
	ID      string    `json:"id"`
	Name    string    `json:"name"`
	Size    int64     `json:"size"`
	URL     string    `json:"url,omitempty"` // where the page got it (clipped)
	Expires time.Time `json:"expires"`
}

// Downloads lists the kept downloads, oldest first.
func (s *Store) Downloads() []Kept {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Kept, 0, len(s.downloads))
	for id, dl := range s.downloads {
		out = append(out, Kept{ID: id, Name: dl.d.Name, Size: dl.size, URL: dl.d.URL, Expires: dl.expires})
	}
	slices.SortFunc(out, func(a, b Kept) int { return a.Expires.Compare(b.Expires) })
	return out
}

// Open opens the finished download id for reading.
func (s *Store) Open(id string) (*os.File, browser.Download, error) {
	s.mu.Lock()
	dl, ok := s.downloads[id]
	s.mu.Unlock()
	if !ok {
		return nil, browser.Download{}, ErrNotFound
	}
	f, err := os.Open(dl.d.Path)
	if err != nil {
		return nil, browser.Download{}, fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	return f, dl.d, nil
}

// Remove deletes the browser's files; the Store takes no more.
func (s *Store) Remove() error {
	s.mu.Lock()
	s.removed = true
	for id, dl := range s.downloads {
		dl.timer.Stop()
		delete(s.downloads, id)
	}
	s.used = 0
	s.mu.Unlock()
	if err := os.RemoveAll(s.cfg.Dir); err != nil {
		return fmt.Errorf("files: %w", err)
	}
	return nil
}
