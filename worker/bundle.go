package worker

import (
	"bytes"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cloudbrowser-go/cloudbrowser/internal/bundle"
	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/egress"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// Virtual browsers reach the network only through the egress guard
// (internal/egress): each browser has its own proxy endpoint, bound to the
// app it serves. The endpoint serves the app's bundle on its internal
// origin, http://<mountPoint>.app.cloudbrowser.internal/, and refuses other
// apps' origins; nothing else (no listener, no host resolver rule) serves
// bundles, so a browser can read only its own app's files.

// AppHostSuffix names the apps' internal origins.
const AppHostSuffix = ".app.cloudbrowser.internal"

// instancePath prefixes the files of an instance's own app version (an
// instance keeps the version it was created with across redeploys).
const instancePath = "/.instance/"

// startEgress starts the guard, refusing the cluster's endpoints that this
// worker knows of (more are added as they are learnt: its own listener at
// Start, the master's gossip and members). New starts it before the pools,
// so no browser, warm ones included, is ever made without it.
func (w *Worker) startEgress() error {
	rules, err := egress.ParseRules("entry", w.cfg.EgressAllow)
	if err != nil {
		return fmt.Errorf("worker: %w", config.Errorf("EgressAllow", "%w", err))
	}
	var cluster []string
	if w.cfg.Master != "" {
		cluster = append(cluster, w.cfg.Master)
	}
	w.egressBlocked = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cloudbrowser_egress_blocked_total",
		Help: "Requests of virtual browsers refused by the egress guard, by app and reason (loopback, private, metadata, cluster, other-app, ...).",
	}, []string{"app", "reason"})
	g, err := egress.New(egress.Config{Allow: rules, Cluster: cluster, InternalSuffix: AppHostSuffix,
		Logger: w.log, Lookup: w.cfg.EgressLookup,
		OnBlock: func(app, reason, _ string) {
			w.egressBlocked.WithLabelValues(app, reason).Inc()
			w.blockedMu.Lock()
			if w.blockedByApp == nil {
				w.blockedByApp = map[string]uint64{}
			}
			w.blockedByApp[app]++
			w.blockedMu.Unlock()
		}})
	if err != nil {
		return err
	}
	w.egress = g
	return nil
}

// browserOptions are the options of a new browser of app ("" = the
// general pool: no app yet, public destinations only).
func (w *Worker) browserOptions(app string) (browser.Options, error) {
	var opts browser.Options
	if app != "" {
		a, _ := w.catalog.app(app)
		opts = browser.Options{Width: a.ViewportWidth, Height: a.ViewportHeight, Allow: w.navigationPolicy(a)}
	}
	if w.egress == nil {
		return opts, errors.New("worker: no egress guard: a browser is never made without one")
	}
	e, err := w.egress.Open(w.tenant(app))
	if err != nil {
		return opts, err
	}
	opts.Egress = e
	return opts, nil
}

// assignEgress binds a general-pool browser's exit to the app it was
// leased for.
func (w *Worker) assignEgress(b browser.Browser, app string) {
	if e, ok := b.Egress().(*egress.Endpoint); ok {
		e.Assign(w.tenant(app))
	}
}

// tenant is app's egress policy: its manifest's opt-ins and its internal
// origin.
func (w *Worker) tenant(app string) *egress.Tenant {
	if app == "" {
		return &egress.Tenant{}
	}
	t := &egress.Tenant{App: app, Internal: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.serveBundle(rw, r, app)
	})}
	if a, ok := w.catalog.app(app); ok {
		if m := manifestOf(a); m != nil {
			// Validated at deploy; a rule that fails now is skipped.
			for _, s := range m.Egress.Allow {
				if r, err := egress.ParseRule(s); err == nil {
					t.Allow = append(t.Allow, r)
				}
			}
		}
	}
	return t
}

// appOrigin is the internal origin of an app's pages.
func appOrigin(mount string) string { return "http://" + mount + AppHostSuffix }

// entryURL is the first page of an instance's virtual browsers.
func (w *Worker) entryURL(in *instance) string {
	e := in.app.Entry
	if strings.HasPrefix(e, "http://") || strings.HasPrefix(e, "https://") {
		return e
	}
	return appOrigin(in.app.MountPoint) + instancePath + in.info.ID + "/" + strings.TrimPrefix(path.Clean("/"+e), "/")
}

// serveBundle serves app's internal origin: /.instance/<id>/<file> from
// that instance's app version, /<file> from the app's current version.
func (w *Worker) serveBundle(rw http.ResponseWriter, r *http.Request, app string) {
	if rest, ok := strings.CutPrefix(r.URL.Path, instancePath); ok {
		iid, file, _ := strings.Cut(rest, "/")
		in, ok := w.instances.get(iid)
		if !ok || in.app.MountPoint != app {
			http.NotFound(rw, r)
			return
		}
		w.serveFile(rw, r, in.app, file)
		return
	}
	a, ok := w.catalog.app(app)
	if !ok {
		http.NotFound(rw, r)
		return
	}
	w.serveFile(rw, r, a, r.URL.Path)
}

// serveFile answers one file of an app's bundle. The manifest is never
// served: it holds pool sequences, which may carry credentials.
func (w *Worker) serveFile(rw http.ResponseWriter, r *http.Request, app wire.App, file string) {
	file = strings.TrimPrefix(path.Clean("/"+file), "/")
	if file == "" {
		file = "index.html"
	}
	data, ok := app.Files[file]
	if !ok || file == bundle.ManifestName {
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

// clientNavigate reports whether app lets users open addresses from the
// client engine (manifest navigation.clientNavigate); then only http and
// https addresses, still under the app's navigation and egress policies.
func clientNavigate(app wire.App) bool {
	m := manifestOf(app)
	return m != nil && m.Navigation.ClientNavigate
}

// manifestOf is app's parsed manifest, nil when it has none or it does not
// parse (it was validated at deploy: the caller keeps its default).
func manifestOf(app wire.App) *bundle.Manifest {
	if len(app.Manifest) == 0 {
		return nil
	}
	m, err := bundle.ParseManifest(app.Manifest)
	if err != nil {
		return nil
	}
	return m
}

// webURL reports an http or https URL.
func webURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// navigationPolicy turns the manifest's navigation patterns into the
// browser's request filter (nil when the app sets none); see
// bundle.Manifest.NavigationPolicy.
func (w *Worker) navigationPolicy(app wire.App) func(string) bool {
	m := manifestOf(app)
	if m == nil {
		return nil
	}
	return m.NavigationPolicy(appOrigin(app.MountPoint))
}
