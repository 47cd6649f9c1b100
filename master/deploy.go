package master

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/cloudbrowser-go/cloudbrowser/internal/bundle"
	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/apijson"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// MaxUpload bounds a deployed archive (compressed).
const MaxUpload = 64 << 20

func viewOf(a wire.App) wire.AppView {
	return wire.AppView{Name: a.Name, MountPoint: a.MountPoint, Description: a.Description, Strategy: a.Strategy,
		Public: a.Public, Disabled: a.Disabled, Version: a.Version, Files: len(a.Files)}
}

func (api *adminAPI) listApps(w http.ResponseWriter, r *http.Request) {
	out := []wire.AppView{}
	for _, a := range api.apps.List() {
		out = append(out, api.apps.view(a))
	}
	apijson.Write(w, http.StatusOK, out)
}

// deploy accepts a tar.gz bundle, validates it again (the CLI already
// did), stores it durably and pushes it to every worker.
func (api *adminAPI) deploy(w http.ResponseWriter, r *http.Request) {
	body := http.MaxBytesReader(w, r.Body, MaxUpload)
	b, err := bundle.Unpack(body, bundle.Limits{})
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			apijson.Error(w, http.StatusRequestEntityTooLarge, "the archive is larger than 64 MiB")
			return
		}
		problems := []map[string]string{}
		var es bundle.Errors
		if errors.As(err, &es) {
			for _, e := range es {
				problems = append(problems, map[string]string{"field": e.Field, "message": e.Msg})
			}
		}
		apijson.Write(w, http.StatusBadRequest, map[string]any{"status": 400, "error": err.Error(), "problems": problems})
		return
	}
	app := b.App()
	if old, ok := api.apps.Get(app.MountPoint); ok {
		app.Disabled = old.Disabled
	}
	by := auth.PrincipalOf(r)
	cur, failed, err := api.apps.Add(r.Context(), app, by)
	if err != nil {
		apijson.Error(w, appErrorStatus(err), err.Error())
		return
	}
	api.log.Info().Str("app", cur.MountPoint).Int("version", cur.Version).Int("files", len(cur.Files)).Str("by", by.Name).
		Int("workers_failed", len(failed)).Str("request_id", r.Header.Get("X-Request-Id")).Msg("application deployed")
	if len(failed) > 0 {
		// The version is current on the master (and reaches workers that
		// register later), but the author must know it is not served
		// everywhere yet.
		names := make([]string, len(failed))
		for i, f := range failed {
			names[i] = f.Worker + ": " + f.Error
		}
		apijson.Write(w, http.StatusBadGateway, map[string]any{"status": http.StatusBadGateway,
			"error": fmt.Sprintf("version %d of /%s is stored on the master, but %d of %d workers did not install it: %s",
				cur.Version, cur.MountPoint, len(failed), len(api.apps.workers()), strings.Join(names, "; ")),
			"app": api.apps.view(cur), "failedWorkers": failed})
		return
	}
	apijson.Write(w, http.StatusCreated, api.apps.view(cur))
}

// appErrorStatus maps an AppManager error to an HTTP status.
func appErrorStatus(err error) int {
	var oe *ownerError
	var we *wire.Error
	switch {
	case errors.As(err, &oe):
		return http.StatusForbidden
	case errors.As(err, &we) && we.Code == wire.CodeUnknownApp:
		return http.StatusNotFound
	case errors.As(err, &we) && we.Code == wire.CodeInvalid:
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

// appAction runs an admin action on one app.
func (api *adminAPI) appAction(w http.ResponseWriter, r *http.Request, act func(ctx context.Context, name string) error) {
	name := r.PathValue("name")
	if err := act(r.Context(), name); err != nil {
		apijson.Error(w, appErrorStatus(err), err.Error())
		return
	}
	a, ok := api.apps.Get(name)
	if !ok {
		apijson.Write(w, http.StatusOK, map[string]any{"mountPoint": name, "removed": true})
		return
	}
	apijson.Write(w, http.StatusOK, api.apps.view(a))
}

// ---- permissions ----

type grantForm struct {
	Instance  string `json:"instance"`
	Browser   string `json:"browser"`
	Principal string `json:"principal"`
	Role      string `json:"role"`
}

// grant sets a role on an instance or browser on the hosting worker.
func (api *adminAPI) grant(w http.ResponseWriter, r *http.Request) {
	var f grantForm
	if !apijson.Decode(w, r, &f) {
		return
	}
	ref, _, ok := api.instanceRef(w, f.Instance)
	if !ok {
		return
	}
	g := wire.BrowserGrant{Instance: f.Instance, Browser: f.Browser, Principal: f.Principal, Role: f.Role}
	if err := (contract.WorkerAppsClient{R: ref}).Grant(r.Context(), g); err != nil {
		status := http.StatusInternalServerError
		var re *rmi.RemoteError
		if errors.As(err, &re) {
			switch re.Code {
			case wire.CodeInvalid:
				status = http.StatusBadRequest
			case wire.CodeUnknownInstance:
				status = http.StatusNotFound
			}
		}
		apijson.Error(w, status, err.Error())
		return
	}
	api.log.Info().Str("instance", f.Instance).Str("browser", f.Browser).Str("principal", f.Principal).Str("role", f.Role).Msg("permission set by admin")
	apijson.Write(w, http.StatusOK, f)
}
