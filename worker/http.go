package worker

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/proxy"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
	"github.com/cloudbrowser-go/cloudbrowser/web"
)

// handler serves the worker's HTTP endpoints. Requests arrive through a
// proxy, so URLs are classified exactly as the proxy does.
func (w *Worker) handler() http.Handler {
	static := http.FileServerFS(web.Static)
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("X-CB-Worker", w.id)
		id := r.Header.Get("X-Request-Id")
		switch r.URL.Path {
		case "/healthz":
			rw.Header().Set("Content-Type", "application/json")
			_, _ = rw.Write([]byte(`{"status":"ok","worker":"` + w.id + `"}` + "\n"))
			return
		case "/readyz":
			rw.Header().Set("Content-Type", "application/json")
			if !w.Ready() {
				rw.WriteHeader(http.StatusServiceUnavailable)
				_, _ = rw.Write([]byte(`{"status":"not registered with the master","worker":"` + w.id + `"}` + "\n"))
				return
			}
			if st, err := w.runtime.Stats(r.Context()); err != nil || (w.runtime.Name() != "none" && st.Processes == 0) {
				rw.WriteHeader(http.StatusServiceUnavailable)
				_, _ = rw.Write([]byte(`{"status":"browser runtime down","worker":"` + w.id + `"}` + "\n"))
				return
			}
			_, _ = rw.Write([]byte(`{"status":"ready","worker":"` + w.id + `"}` + "\n"))
			return
		}
		t := proxy.Classify(r.Method, r.URL.EscapedPath(), isUpgrade(r))
		switch t.Kind {
		case proxy.KindApp:
			w.serveApp(rw, r, id, t)
		case proxy.KindInstance:
			w.serveInstance(rw, r, id, t)
		case proxy.KindBrowser:
			w.serveBrowser(rw, r, id, t)
		case proxy.KindWebSocket:
			w.serveSocket(rw, r, id, t)
		case proxy.KindResource:
			in, ok := w.hosted(rw, r, id, t)
			if !ok {
				return
			}
			if rest, ok := strings.CutPrefix(t.Rest, "_cb/"); ok && t.BrowserID == "" {
				r2 := r.Clone(r.Context())
				r2.URL.Path = "/" + path.Clean("/" + rest)[1:]
				rw.Header().Set("Cache-Control", "no-cache")
				static.ServeHTTP(rw, r2)
				return
			}
			_ = in
			w.page(rw, r, id, http.StatusNotFound, "Not found", "There is nothing at this address.")
		default:
			w.page(rw, r, id, http.StatusNotFound, "Not found", "There is nothing at this address.")
		}
	})
}

func isUpgrade(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

func (w *Worker) page(rw http.ResponseWriter, r *http.Request, id string, status int, title, msg string) {
	proxy.WritePage(rw, r, id, status, title, msg, "", "")
}

// serveApp applies the app's instantiation strategy: the master finds or
// places the user's instance (possibly on another worker) and the user is
// redirected to its App-instance URL, which leads to a Browser URL.
func (w *Worker) serveApp(rw http.ResponseWriter, r *http.Request, id string, t proxy.Target) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		rw.Header().Set("Allow", "GET, HEAD")
		w.page(rw, r, id, http.StatusMethodNotAllowed, "Method not allowed", "Open this address with GET.")
		return
	}
	app, ok := w.apps.app(t.App)
	if !ok {
		w.page(rw, r, id, http.StatusNotFound, "Application not found", "There is no application at this address.")
		return
	}
	if app.Disabled {
		w.page(rw, r, id, http.StatusServiceUnavailable, "Application unavailable",
			"This application has been disabled by an administrator.")
		return
	}
	user := w.users.identify(rw, r)
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	p, err := w.place(ctx, t.App, user)
	if err != nil {
		w.placeError(rw, r, id, t, err)
		return
	}
	w.log.Info().Str("request_id", id).Str("app", t.App).Str("instance", p.InstanceID).Str("on", p.WorkerID).
		Bool("created", p.Created).Msg("application request placed")
	redirect(rw, r, "/"+t.App+"/a/"+p.InstanceID)
}

func (w *Worker) placeError(rw http.ResponseWriter, r *http.Request, id string, t proxy.Target, err error) {
	var re *rmi.RemoteError
	code := ""
	if errors.As(err, &re) {
		code = re.Code
	}
	w.log.Warn().Str("request_id", id).Str("app", t.App).Str("code", code).Err(err).Msg("placement failed")
	switch code {
	case wire.CodeUnknownApp:
		w.page(rw, r, id, http.StatusNotFound, "Application not found", "There is no application at this address.")
	case wire.CodeNoWorkers:
		rw.Header().Set("Retry-After", "5")
		w.page(rw, r, id, http.StatusServiceUnavailable, "No workers available",
			"No worker can host this application right now. Please retry shortly.")
	default:
		rw.Header().Set("Retry-After", "2")
		w.page(rw, r, id, http.StatusServiceUnavailable, "Service unavailable",
			"A new app instance could not be started. Please retry shortly.")
	}
}

// hosted finds the instance of t on this worker or answers 404.
func (w *Worker) hosted(rw http.ResponseWriter, r *http.Request, id string, t proxy.Target) (*instance, bool) {
	in, ok := w.apps.instance(t.InstanceID)
	if !ok || in.app.MountPoint != t.App {
		w.page(rw, r, id, http.StatusNotFound, "App instance not found",
			"This app instance does not exist (it may have been closed).")
		return nil, false
	}
	return in, true
}

// serveInstance sends the user to their browser in the instance.
func (w *Worker) serveInstance(rw http.ResponseWriter, r *http.Request, id string, t proxy.Target) {
	in, ok := w.hosted(rw, r, id, t)
	if !ok {
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		rw.Header().Set("Allow", "GET, HEAD")
		w.page(rw, r, id, http.StatusMethodNotAllowed, "Method not allowed", "Open this address with GET.")
		return
	}
	user := w.users.identify(rw, r)
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	b, err := w.apps.browserFor(ctx, in, user)
	if err != nil {
		w.log.Error().Str("request_id", id).Str("instance", in.info.ID).Err(err).Msg("browser creation failed")
		if errors.Is(err, errInstanceClosed) {
			w.page(rw, r, id, http.StatusNotFound, "App instance not found", "This app instance was closed.")
			return
		}
		rw.Header().Set("Retry-After", "2")
		w.page(rw, r, id, http.StatusServiceUnavailable, "Browser unavailable",
			"A virtual browser could not be started. Please retry shortly.")
		return
	}
	redirect(rw, r, "/"+t.App+"/a/"+in.info.ID+"/b/"+b.id)
}

// serveBrowser returns the client engine page.
func (w *Worker) serveBrowser(rw http.ResponseWriter, r *http.Request, id string, t proxy.Target) {
	in, ok := w.hosted(rw, r, id, t)
	if !ok {
		return
	}
	if _, ok := in.browser(t.BrowserID); !ok {
		w.page(rw, r, id, http.StatusNotFound, "Browser not found",
			"This virtual browser does not exist (it may have been closed).")
		return
	}
	base := "/" + t.App + "/a/" + in.info.ID
	var buf bytes.Buffer
	err := web.Engine.Execute(&buf, web.EngineData{
		App: t.App, AppName: in.app.Name, InstanceID: in.info.ID, BrowserID: t.BrowserID, Worker: w.id,
		Base: base, Socket: base + "/b/" + t.BrowserID + "/ws",
	})
	if err != nil {
		w.log.Error().Err(err).Msg("engine template")
		w.page(rw, r, id, http.StatusInternalServerError, "Internal error", "The page could not be rendered.")
		return
	}
	proxy.WriteHTML(rw, r, buf.Bytes(), "no-store")
}

// serveSocket connects a client engine to its virtual browser.
func (w *Worker) serveSocket(rw http.ResponseWriter, r *http.Request, id string, t proxy.Target) {
	in, ok := w.hosted(rw, r, id, t)
	if !ok {
		return
	}
	b, ok := in.browser(t.BrowserID)
	if !ok {
		w.page(rw, r, id, http.StatusNotFound, "Browser not found", "This virtual browser does not exist.")
		return
	}
	user := w.users.current(r)
	// Until the permission manager exists, only the browser's owner drives
	// it; anyone else holding the URL watches.
	owner := user != "" && user == b.owner
	b.hub.serve(rw, r, w.id, !owner, owner)
}

func redirect(rw http.ResponseWriter, r *http.Request, to string) {
	rw.Header().Set("Cache-Control", "no-store")
	http.Redirect(rw, r, to, http.StatusFound)
}
