// Package assets serves a fixed set of static files (the client engine's
// scripts and styles, embedded in the binary) the way a browser caches best.
// Embedded files have no modification time, so validators come from the
// content: every file gets a strong ETag (a hash of its bytes, computed once
// at start) and a version for its URL (name?v=<version>). A request carrying
// the current version may be cached for a year without revalidation (the URL
// changes when the content does); any other request must revalidate, which
// costs a 304 of a few hundred bytes. Compressible files are gzipped once at
// start and sent to clients that accept it.
package assets

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
)

const (
	// Immutable is the Cache-Control of a versioned URL whose version is
	// current: its content never changes under that URL.
	Immutable = "public, max-age=31536000, immutable"
	// Revalidate is the Cache-Control of any other request: keep it, but
	// ask (If-None-Match) before each use.
	Revalidate = "no-cache"
	// gzipSuffix marks the ETag of the gzip variant: a different
	// representation needs a different strong validator.
	gzipSuffix = "-gz"
)

// Set is the files of one file system, read, hashed and compressed once.
// It is safe for concurrent use.
type Set struct {
	files map[string]*file
}

type file struct {
	ctype   string
	version string
	body    []byte
	etag    string
	gz      []byte // nil: not worth compressing
	gzETag  string
}

// New reads the regular files of fsys that keep accepts (all if keep is
// nil). Names are slash-separated paths relative to its root, as
// fs.WalkDir gives them.
func New(fsys fs.FS, keep func(name string) bool) (*Set, error) {
	s := &Set{files: map[string]*file{}}
	err := fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() || keep != nil && !keep(name) {
			return nil
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		f, err := newFile(name, body)
		if err != nil {
			return err
		}
		s.files[name] = f
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("assets: %w", err)
	}
	return s, nil
}

func newFile(name string, body []byte) (*file, error) {
	sum := sha256.Sum256(body)
	// 96 bits: collisions do not matter at this scale, and URLs stay short.
	v := base64.RawURLEncoding.EncodeToString(sum[:12])
	f := &file{body: body, version: v, etag: `"` + v + `"`,
		ctype: mime.TypeByExtension(path.Ext(name))}
	if f.ctype == "" {
		f.ctype = http.DetectContentType(body)
	}
	if compressible(f.ctype) {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		if _, err := zw.Write(body); err != nil {
			return nil, fmt.Errorf("gzip %s: %w", name, err)
		}
		if err := zw.Close(); err != nil {
			return nil, fmt.Errorf("gzip %s: %w", name, err)
		}
		// Small files may not shrink enough to pay for the client's
		// decompression: keep gzip only when it saves a tenth.
		if buf.Len() < len(body)*9/10 {
			f.gz, f.gzETag = buf.Bytes(), `"`+v+gzipSuffix+`"`
		}
	}
	return f, nil
}

func compressible(ctype string) bool {
	mt, _, _ := mime.ParseMediaType(ctype)
	switch {
	case strings.HasPrefix(mt, "text/"):
		return true
	case mt == "application/javascript", mt == "application/json", mt == "image/svg+xml",
		strings.HasSuffix(mt, "+json"), strings.HasSuffix(mt, "+xml"):
		return true
	}
	return false
}

// Version returns the content version of the file name ("" if there is
// none).
func (s *Set) Version(name string) string {
	if f := s.files[name]; f != nil {
		return f.version
	}
	return ""
}

// URL returns name with its version query ("engine.js?v=…"), the form pages
// should reference: browsers then keep the file until the page names
// another version. An unknown name is an error (a page referencing a file
// the binary lacks).
func (s *Set) URL(name string) (string, error) {
	f := s.files[name]
	if f == nil {
		return "", fmt.Errorf("assets: no file %q", name)
	}
	return name + "?v=" + f.version, nil
}

// Serve answers r with the file name and reports whether there is such a
// file; for an unknown name it writes nothing, so the caller answers with
// its own 404 page. Only GET and HEAD are served (others get 405).
func (s *Set) Serve(w http.ResponseWriter, r *http.Request, name string) bool {
	f := s.files[name]
	if f == nil {
		return false
	}
	h := w.Header()
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return true
	}
	if r.URL.Query().Get("v") == f.version {
		h.Set("Cache-Control", Immutable)
	} else {
		// No version or an old one (a page cached from before an
		// upgrade): the current bytes, but never kept without asking.
		h.Set("Cache-Control", Revalidate)
	}
	body, etag := f.body, f.etag
	if f.gz != nil {
		// Caches must key on Accept-Encoding whichever variant goes out.
		h.Add("Vary", "Accept-Encoding")
		// A Range request gets the identity bytes: ranges of a gzip
		// stream are useless to a client that wanted part of the file.
		if r.Header.Get("Range") == "" && acceptsGzip(r.Header.Values("Accept-Encoding")) {
			body, etag = f.gz, f.gzETag
			h.Set("Content-Encoding", "gzip")
		}
	}
	h.Set("Content-Type", f.ctype)
	h.Set("ETag", etag)
	// ServeContent answers If-None-Match (304), If-Match, Range and HEAD
	// from the ETag set above; a zero time sends no Last-Modified.
	if h.Get("Content-Encoding") != "" {
		w = gzipAnswer{w, len(body)}
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
	return true
}

// gzipAnswer fixes the headers of the gzip variant as ServeContent writes
// them: it leaves out Content-Length when there is an encoding (made for
// handlers that compress on the fly; ours is known), and a bodiless answer
// (304, 412) must not claim an encoding.
type gzipAnswer struct {
	http.ResponseWriter
	n int
}

func (w gzipAnswer) WriteHeader(code int) {
	if code == http.StatusOK {
		w.Header().Set("Content-Length", strconv.Itoa(w.n))
	} else {
		w.Header().Del("Content-Encoding")
	}
	w.ResponseWriter.WriteHeader(code)
}

// acceptsGzip reports whether an Accept-Encoding allows gzip: listed (or
// x-gzip, or *) with a non-zero quality, and not refused by name.
func acceptsGzip(values []string) bool {
	named, star := false, false
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			coding, params, _ := strings.Cut(part, ";")
			coding = strings.ToLower(strings.TrimSpace(coding))
			ok := quality(params) > 0
			switch coding {
			case "gzip", "x-gzip":
				if !ok {
					return false // an explicit refusal wins over *
				}
				named = true
			case "*":
				star = ok
			}
		}
	}
	return named || star
}

// quality parses the q parameter of an Accept-Encoding element (1 if
// absent, 0 if malformed).
func quality(params string) float64 {
	for _, p := range strings.Split(params, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
			q, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || q < 0 || q > 1 {
				return 0
			}
			return q
		}
	}
	return 1
}
