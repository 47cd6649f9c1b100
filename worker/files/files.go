// Package files keeps one virtual browser's files on its worker: what its
// users upload for the page's file pickers (and drop on it), and what the
// page downloads. Each browser has a folder of its own, within a byte
// limit for uploads and downloads together; a finished download is kept
// for a while, and everything goes with the browser (Remove).
package files

import (
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// Defaults of Config.
const (
	DefaultMaxBytes = 100 << 20
	DefaultKeepFor  = time.Hour
	// MaxFiles bounds the files of one upload.
	MaxFiles = 32
	// maxName bounds a file name as kept (bytes).
	maxName = 200
)

// Errors of a Store; an HTTP answer maps them to its status.
var (
	// ErrTooLarge: the browser's byte limit is reached.
	ErrTooLarge = errors.New("files: over the browser's limit")
	// ErrTooMany: more than MaxFiles in one upload.
	ErrTooMany = errors.New("files: too many files")
	// ErrNoFiles: an upload without a file.
	ErrNoFiles = errors.New("files: no file in the upload")
	// ErrNotFound: no finished download of that id (never, failed,
	// expired, or the browser's files removed).
	ErrNotFound = errors.New("files: no such download")
	// ErrRemoved: the browser ended.
	ErrRemoved = errors.New("files: removed")
)

// Config is a Store's folder and limits.
type Config struct {
	// Dir is the browser's folder; New creates it (mode 0700) and
	// Remove deletes it.
	Dir string
	// MaxBytes bounds uploads and downloads together (0 =
	// DefaultMaxBytes).
	MaxBytes int64
	// KeepFor is how long a finished download stays (0 =
	// DefaultKeepFor).
	KeepFor time.Duration
	Clock   clock.Clock // nil = the real clock
}

// Store is one browser's files. Its methods are safe for concurrent use.
type Store struct {
	cfg Config

	mu        sync.Mutex
	used      int64
	nextUp    int
	downloads map[string]*download
	removed   bool
}

type download struct {
	d       browser.Download
	size    int64
	expires time.Time
	timer   clock.Timer // expiry
}

// Upload is one file saved from a user's upload.
type Upload struct {
	Name string // as the user's browser named it, cleaned
	Path string
	Size int64
}

// New creates the browser's folder and its downloads folder.
func New(cfg Config) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("files: no folder")
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.KeepFor <= 0 {
		cfg.KeepFor = DefaultKeepFor
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	s := &Store{cfg: cfg, downloads: map[string]*download{}}
	if err := os.MkdirAll(s.DownloadDir(), 0o700); err != nil {
		return nil, fmt.Errorf("files: %w", err)
	}
	return s, nil
}

// DownloadDir is where the page's downloads are saved.
func (s *Store) DownloadDir() string { return filepath.Join(s.cfg.Dir, "downloads") }

// MaxBytes is the browser's limit.
func (s *Store) MaxBytes() int64 { return s.cfg.MaxBytes }

// Used is what the browser's files take now.
func (s *Store) Used() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}

// SaveUploads saves the files of a multipart upload (its parts with a
// file name; others are skipped) in a folder of their own, within the
// limits. On any error nothing of it stays.
func (s *Store) SaveUploads(r *multipart.Reader) (ups []Upload, err error) {
	dir, err := s.uploadDir()
	if err != nil {
		return nil, err
	}
	var saved int64
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
			s.release(saved)
		}
	}()
	names := map[string]bool{}
	for {
		p, err := r.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("files: reading the upload: %w", err)
		}
		if p.FileName() == "" {
			continue
		}
		if len(ups) == MaxFiles {
			return nil, fmt.Errorf("%w: at most %d at once", ErrTooMany, MaxFiles)
		}
		up, err := s.savePart(dir, p, names)
		saved += up.Size
		if err != nil {
			return nil, err
		}
		ups = append(ups, up)
	}
	if len(ups) == 0 {
		return nil, ErrNoFiles
	}
	return ups, nil
}

// Discard deletes uploads the page did not take and gives back their
// bytes.
func (s *Store) Discard(ups []Upload) {
	var n int64
	for _, u := range ups {
		if os.Remove(u.Path) == nil {
			n += u.Size
		}
	}
	if len(ups) > 0 {
		_ = os.Remove(filepath.Dir(ups[0].Path)) // the upload's folder, now empty
	}
	s.release(n)
}

// uploadDir makes the folder of one upload: uploads/<n>, so two files of
// the same name from two pickers do not meet.
func (s *Store) uploadDir() (string, error) {
	s.mu.Lock()
	if s.removed {
		s.mu.Unlock()
		return "", ErrRemoved
	}
	s.nextUp++
	dir := filepath.Join(s.cfg.Dir, "uploads", strconv.Itoa(s.nextUp))
	s.mu.Unlock()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("files: %w", err)
	}
	return dir, nil
}

// savePart writes one file, taking its bytes from the budget as they
// come; up.Size is what it took, also on an error.
func (s *Store) savePart(dir string, p *multipart.Part, names map[string]bool) (up Upload, err error) {
	up.Name = cleanName(p.FileName())
	for base, n := up.Name, 2; names[up.Name]; n++ {
		ext := filepath.Ext(base)
		up.Name = strings.TrimSuffix(base, ext) + " (" + strconv.Itoa(n) + ")" + ext
	}
	names[up.Name] = true
	up.Path = filepath.Join(dir, up.Name)
	f, err := os.OpenFile(up.Path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return up, fmt.Errorf("files: %w", err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		n, rerr := p.Read(buf)
		if n > 0 {
			if !s.take(int64(n)) {
				return up, fmt.Errorf("%w (%d MiB): %s", ErrTooLarge, s.cfg.MaxBytes>>20, up.Name)
			}
			up.Size += int64(n)
			if _, err := f.Write(buf[:n]); err != nil {
				return up, fmt.Errorf("files: %w", err)
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return up, fmt.Errorf("files: reading %s: %w", up.Name, rerr)
		}
	}
	if err := f.Close(); err != nil {
		return up, fmt.Errorf("files: %w", err)
	}
	return up, nil
}

// take takes n bytes of the budget, if there are.
func (s *Store) take(n int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removed || s.used+n > s.cfg.MaxBytes {
		return false
	}
	s.used += n
	return true
}

func (s *Store) release(n int64) {
	s.mu.Lock()
	if !s.removed { // Remove zeroed the count
		s.used -= n
	}
	s.mu.Unlock()
}

// cleanName keeps a user's file name usable as one path element: no
// folders, no control characters, not empty, at most maxName bytes.
func cleanName(name string) string {
	name = filepath.Base(strings.ReplaceAll(name, `\`, "/"))
	name = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '/' {
			return -1
		}
		return r
	}, strings.ToValidUTF8(name, ""))
	name = strings.TrimSpace(name)
	if name == "" || name == "." || name == ".." {
		name = "file"
	}
	for len(name) > maxName {
		_, n := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-n]
	}
	return name
}
