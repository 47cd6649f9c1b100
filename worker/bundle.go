package worker

import (
	"bytes"
	"context"
	"errors"
	"mime"
	"net"
	"net/http"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/bundle"
	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// The bundle server serves app bundle files to this worker's virtual
// browsers on an internal origin: bound to loopback and keyed by a random
// per-process token in the path, so other hosts cannot reach it and local
// users cannot guess it. End users never load these URLs.

func (w *Worker) startBundleServer(ctx context.Context) error {
	ln := w.cfg.BundleListener
	if ln == nil {
		var lc net.ListenConfig
		var err error
		if ln, err = lc.Listen(ctx, "tcp", "127.0.0.1:0"); err != nil {
			return err
		}
	}
	w.bundleLn = ln
	w.bundleToken = ids.Random(24)
	srv := &http.Server{Handler: http.HandlerFunc(w.serveBundle), ReadHeaderTimeout: 10 * time.Second}
	w.bundleSrv = srv
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			w.log.Error().Err(err).Msg("bundle server stopped")
		}
	}()
	return nil
}

// bundleOrigin is the origin of the app pages this worker serves to its
// browsers.
func (w *Worker) bundleOrigin() string { return "http://" + w.bundleLn.Addr().String() }

// entryURL is the first page of an instance's virtual browsers.
func (w *Worker) entryURL(in *instance) string {
	e := in.app.Entry
	if strings.HasPrefix(e, "http://") || strings.HasPrefix(e, "https://") {
		return e
	}
	return w.bundleOrigin() + "/" + w.bundleToken + "/" + in.info.ID + "/" + strings.TrimPrefix(path.Clean("/"+e), "/")
}

// AppHostSuffix names the apps' stable internal origins: the worker's
// Chromium maps http://<mountPoint>.app.cloudbrowser.internal/ to the bundle
// server (a --host-resolver-rules flag), so pool sequences can name an
// app's own pages, and nothing else can resolve the name.
const AppHostSuffix = ".app.cloudbrowser.internal"

// HostResolverRule is the Chromium flag that maps the apps' internal
// origins to the bundle listener at addr.
func HostResolverRule(addr string) string {
	return "--host-resolver-rules=MAP *" + AppHostSuffix + " " + addr
}

// serveBundle serves /<token>/<instanceId>/<file> from the instance's app
// version, and http://<app>.app.cloudbrowser.internal/<file> from the app's
// current version.
func (w *Worker) serveBundle(rw http.ResponseWriter, r *http.Request) {
	if host, _, _ := strings.Cut(r.Host, ":"); strings.HasSuffix(host, AppHostSuffix) {
		app, ok := w.apps.app(strings.TrimSuffix(host, AppHostSuffix))
		if !ok {
			http.NotFound(rw, r)
			return
		}
		w.serveFile(rw, r, app, r.URL.Path)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/"+w.bundleToken+"/")
	if !ok {
		http.NotFound(rw, r)
		return
	}
	iid, file, _ := strings.Cut(rest, "/")
	in, ok := w.apps.instance(iid)
	if !ok {
		http.NotFound(rw, r)
		return
	}
	w.serveFile(rw, r, in.app, file)
}

// serveFile answers one file of an app's bundle.
func (w *Worker) serveFile(rw http.ResponseWriter, r *http.Request, app wire.App, file string) {
	file = strings.TrimPrefix(path.Clean("/"+file), "/")
	if file == "" {
		file = "index.html"
	}
	data, ok := app.Files[file]
	if !ok {
		http.NotFound(rw, r)
		return
	}
	ct := mime.TypeByExtension(path.Ext(file))
	if ct == "" {
		ct = http.DetectContentType(data)
	}
	rw.Header().Set("Content-Type", ct)
	http.ServeContent(rw, r, file, time.Time{}, bytes.NewReader(data))
}

// navigationPolicy turns the manifest's navigation patterns into the
// browser's request filter (nil when the app sets none). The app's own
// bundle origin is always allowed.
func (w *Worker) navigationPolicy(app wire.App) func(string) bool {
	if len(app.Manifest) == 0 {
		return nil
	}
	m, err := bundle.ParseManifest(app.Manifest)
	if err != nil || len(m.Navigation.Allow)+len(m.Navigation.Deny) == 0 {
		return nil
	}
	compile := func(ps []string) []*regexp.Regexp {
		var out []*regexp.Regexp
		for _, p := range ps {
			if re, err := bundle.CompilePattern(p); err == nil {
				out = append(out, re)
			}
		}
		return out
	}
	allow, deny := compile(m.Navigation.Allow), compile(m.Navigation.Deny)
	own, appOrigin := w.bundleOrigin()+"/", "http://"+app.MountPoint+AppHostSuffix+"/"
	return func(u string) bool {
		if strings.HasPrefix(u, own) || strings.HasPrefix(u, appOrigin) {
			return true
		}
		for _, re := range deny {
			if re.MatchString(u) {
				return false
			}
		}
		if len(allow) == 0 {
			return true
		}
		for _, re := range allow {
			if re.MatchString(u) {
				return true
			}
		}
		return false
	}
}
