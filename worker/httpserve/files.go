package httpserve

import (
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"

	"github.com/cloudbrowser-go/cloudbrowser/internal/pages"
	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
	"github.com/cloudbrowser-go/cloudbrowser/worker/engine"
	"github.com/cloudbrowser-go/cloudbrowser/worker/files"
)

// The Browser URL's file door, under <Browser URL>/files/:
//   - POST up/<picker>: the files a user chose for the page's file picker
//     (multipart/form-data);
//   - POST drop?x=&y=: files the user dropped on the screen at x, y;
//   - GET down/<id>: a finished download.
//
// Each is checked like the Browser URL itself (the viewer's access), and
// only viewers who may drive the browser pass; posts must come from the
// engine's own origin (http.CrossOriginProtection).

// maxUploadBody bounds an upload's request beyond the files' own limit
// (the multipart framing), so the body is never read past what can fit.
const maxUploadOverhead = 1 << 20

var crossOrigin = http.NewCrossOriginProtection()

// serveFiles answers a request of the file door; rest is the path after
// "files/".
func (s *Server) serveFiles(rw http.ResponseWriter, r *http.Request, id string, t urlkind.Target, rest string) {
	_, b, user, ok := s.browserOf(rw, r, id, t, func(Instance) {
		s.fileError(rw, r, id, http.StatusGone, "This browser was released; its files are gone.")
	})
	if !ok {
		return
	}
	if b.Role(user) < RoleReaderWriter {
		s.fileError(rw, r, id, http.StatusForbidden, "You may only watch this browser: its files are for those who may use it.")
		return
	}
	door := b.Hub().Files()
	switch kind, arg, _ := strings.Cut(rest, "/"); {
	case kind == "down" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		s.serveDownload(rw, r, id, door, arg)
	case (kind == "up" || (kind == "drop" && arg == "")) && r.Method == http.MethodPost:
		s.serveUpload(rw, r, id, door, kind, arg)
	default:
		s.fileError(rw, r, id, http.StatusNotFound, "There is nothing at this address.")
	}
}

func (s *Server) serveUpload(rw http.ResponseWriter, r *http.Request, id string, door *engine.Files, kind, arg string) {
	if err := crossOrigin.Check(r); err != nil {
		s.fileError(rw, r, id, http.StatusForbidden, "Files are taken only from this browser's own page.")
		return
	}
	mr, err := multipartOf(rw, r, door)
	if err != nil {
		s.fileError(rw, r, id, http.StatusBadRequest, "Send the files as multipart/form-data.")
		return
	}
	var ups []files.Upload
	if kind == "up" {
		picker, perr := strconv.ParseUint(arg, 10, 64)
		if perr != nil {
			s.fileError(rw, r, id, http.StatusNotFound, "No such file picker.")
			return
		}
		ups, err = door.Upload(r.Context(), picker, mr)
	} else {
		x, xerr := strconv.ParseFloat(r.URL.Query().Get("x"), 64)
		y, yerr := strconv.ParseFloat(r.URL.Query().Get("y"), 64)
		if xerr != nil || yerr != nil || x < 0 || y < 0 || x > 1e5 || y > 1e5 {
			s.fileError(rw, r, id, http.StatusBadRequest, "A drop needs its place: x and y in CSS pixels.")
			return
		}
		ups, err = door.Drop(r.Context(), x, y, mr)
	}
	if err != nil {
		status, msg := uploadRefusal(err)
		s.log.Info().Str("request_id", id).Err(err).Int("status", status).Msg("upload refused")
		s.fileError(rw, r, id, status, msg)
		return
	}
	var n int64
	for _, u := range ups {
		n += u.Size
	}
	s.log.Info().Str("request_id", id).Int("files", len(ups)).Int64("bytes", n).Str("to", kind).Msg("files uploaded")
	rw.WriteHeader(http.StatusNoContent)
}

// multipartOf is r's multipart body, read at most to what the browser's
// files may still take.
func multipartOf(rw http.ResponseWriter, r *http.Request, door *engine.Files) (*multipart.Reader, error) {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return nil, errors.New("not multipart/form-data")
	}
	if limit := door.Limit(); limit > 0 {
		r.Body = http.MaxBytesReader(rw, r.Body, limit+maxUploadOverhead)
	}
	return multipart.NewReader(r.Body, params["boundary"]), nil
}

// uploadRefusal maps an upload's error to what the user is told.
func uploadRefusal(err error) (int, string) {
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, files.ErrTooLarge) || errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, "Too large: the browser's files would pass its limit."
	case errors.Is(err, files.ErrTooMany):
		return http.StatusRequestEntityTooLarge, "Too many files at once (at most " + strconv.Itoa(files.MaxFiles) + ")."
	case errors.Is(err, files.ErrNoFiles):
		return http.StatusBadRequest, "No file was sent."
	case errors.Is(err, engine.ErrUploadsOff), errors.Is(err, engine.ErrNoFileDoor):
		return http.StatusForbidden, capital(err.Error()) + "."
	case errors.Is(err, files.ErrRemoved):
		return http.StatusGone, "This browser ended; its files are gone."
	default:
		return http.StatusConflict, "The page no longer waits for these files (its picker closed). Try again."
	}
}

func (s *Server) serveDownload(rw http.ResponseWriter, r *http.Request, id string, door *engine.Files, dl string) {
	f, d, err := door.Open(dl)
	switch {
	case errors.Is(err, engine.ErrDownloadsOff), errors.Is(err, engine.ErrNoFileDoor):
		s.fileError(rw, r, id, http.StatusForbidden, capital(err.Error())+".")
		return
	case err != nil:
		s.fileError(rw, r, id, http.StatusNotFound, "No such download: it never finished, or it was deleted after a while.")
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		s.fileError(rw, r, id, http.StatusNotFound, "No such download.")
		return
	}
	h := rw.Header()
	// Always a download, never rendered at this origin: the page chose
	// the bytes.
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": d.Name}))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "private, no-store")
	http.ServeContent(rw, r, "", fi.ModTime(), f)
}

// fileError answers the engine's fetch with a plain-text message it shows
// as it is; a person opening the address gets the usual page.
func (s *Server) fileError(rw http.ResponseWriter, r *http.Request, id string, status int, msg string) {
	if strings.Contains(r.Header.Get("Accept"), "text/html") {
		pages.Write(rw, r, id, pages.Page{Status: status, Title: http.StatusText(status), Message: msg})
		return
	}
	rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
	rw.Header().Set("X-Content-Type-Options", "nosniff")
	rw.WriteHeader(status)
	_, _ = io.WriteString(rw, msg)
}

func capital(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
