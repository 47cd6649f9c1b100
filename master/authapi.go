package master

import (
	"errors"
	"net/http"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/apijson"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
)

// The HTTP side of package auth: the middleware of the admin API and the
// endpoints for accounts and authors, which act on the master's
// auth.Auth beside the other routes of the admin API.

// auth requires a Bearer token of at least the given role (auth.Auth.Check
// says who passes); the handler finds who it is with auth.PrincipalOf.
func (api *adminAPI) auth(need auth.Role, h http.HandlerFunc) http.Handler {
	return apijson.Guard(api.access.Check, need, h)
}

type userForm struct {
	Name     string `json:"name"`
	Password string `json:"password"`
}

func accountStatus(err error) int {
	var we *wire.Error
	if errors.As(err, &we) {
		switch we.Code {
		case wire.CodeInvalid:
			return http.StatusBadRequest
		case wire.CodeUnknownUser:
			return http.StatusNotFound
		}
	}
	return http.StatusInternalServerError
}

func (api *adminAPI) userRoutes(mux *http.ServeMux) {
	mux.Handle("GET /api/v1/users", api.auth(auth.RoleAdmin, func(w http.ResponseWriter, r *http.Request) {
		apijson.Write(w, http.StatusOK, api.access.Accounts().List())
	}))
	mux.Handle("POST /api/v1/users", api.auth(auth.RoleAdmin, func(w http.ResponseWriter, r *http.Request) {
		var f userForm
		if !apijson.Decode(w, r, &f) {
			return
		}
		if err := api.access.Accounts().Add(f.Name, f.Password); err != nil {
			apijson.Error(w, accountStatus(err), err.Error())
			return
		}
		api.log.Info().Str("user", f.Name).Msg("account created")
		apijson.Write(w, http.StatusCreated, map[string]string{"name": f.Name})
	}))
	mux.Handle("PUT /api/v1/users/{name}/password", api.auth(auth.RoleAdmin, func(w http.ResponseWriter, r *http.Request) {
		var f userForm
		if !apijson.Decode(w, r, &f) {
			return
		}
		if err := api.access.Accounts().SetPassword(r.PathValue("name"), f.Password); err != nil {
			apijson.Error(w, accountStatus(err), err.Error())
			return
		}
		apijson.Write(w, http.StatusOK, map[string]string{"name": r.PathValue("name")})
	}))
	mux.Handle("DELETE /api/v1/users/{name}", api.auth(auth.RoleAdmin, func(w http.ResponseWriter, r *http.Request) {
		if err := api.access.Accounts().Remove(r.PathValue("name")); err != nil {
			apijson.Error(w, accountStatus(err), err.Error())
			return
		}
		apijson.Write(w, http.StatusOK, map[string]any{"name": r.PathValue("name"), "removed": true})
	}))
}

func (api *adminAPI) authorRoutes(mux *http.ServeMux) {
	mux.Handle("GET /api/v1/authors", api.auth(auth.RoleAdmin, func(w http.ResponseWriter, r *http.Request) {
		apijson.Write(w, http.StatusOK, api.access.Authors().List())
	}))
	mux.Handle("POST /api/v1/authors", api.auth(auth.RoleAdmin, func(w http.ResponseWriter, r *http.Request) {
		var f struct {
			Name string `json:"name"`
		}
		if !apijson.Decode(w, r, &f) {
			return
		}
		tok, err := api.access.Authors().Add(f.Name, api.clock.Now())
		if err != nil {
			status := accountStatus(err)
			if dup := (*auth.AuthorExistsError)(nil); errors.As(err, &dup) {
				status = http.StatusConflict
			}
			apijson.Write(w, status, map[string]any{"status": status, "error": err.Error(), "field": "name"})
			return
		}
		api.log.Info().Str("author", f.Name).Msg("author created")
		apijson.Write(w, http.StatusCreated, map[string]string{"name": f.Name, "token": tok})
	}))
	mux.Handle("DELETE /api/v1/authors/{name}", api.auth(auth.RoleAdmin, func(w http.ResponseWriter, r *http.Request) {
		if err := api.access.Authors().Remove(r.PathValue("name")); err != nil {
			apijson.Error(w, accountStatus(err), err.Error())
			return
		}
		api.log.Info().Str("author", r.PathValue("name")).Msg("author removed")
		apijson.Write(w, http.StatusOK, map[string]any{"name": r.PathValue("name"), "removed": true})
	}))
}
