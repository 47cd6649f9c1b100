// Package apijson holds what every handler of the master's JSON API
// shares, so that the master and the packages serving parts of its API
// (master/jobsapi) answer alike: the JSON answers and errors, the request
// bodies, and the authentication in front of a handler.
package apijson

import (
	"encoding/json"
	"net/http"

	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
)

// Write answers v as indented JSON with status; answers are never cached,
// as they describe the cluster's state or a principal's data.
func Write(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// Error answers {"status": status, "error": msg}.
func Error(w http.ResponseWriter, status int, msg string) {
	Write(w, status, map[string]any{"status": status, "error": msg})
}

// Decode reads a JSON request body of at most 64 KiB into v, refusing
// unknown fields so that a misspelt one is not silently ignored; on
// failure it answers 400 and returns false.
func Decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		Error(w, http.StatusBadRequest, "request body: "+err.Error())
		return false
	}
	return true
}

// CheckFunc authenticates a request needing at least a role
// (auth.Auth.Check).
type CheckFunc func(r *http.Request, need auth.Role) (auth.Principal, *auth.Refusal)

// Guard lets a request through to h only if check passes it with the role
// need; h finds who it is with auth.PrincipalOf. A refusal is answered as
// a JSON error, with its WWW-Authenticate challenge if it has one.
func Guard(check CheckFunc, need auth.Role, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, refused := check(r, need)
		if refused != nil {
			if refused.Challenge != "" {
				w.Header().Set("WWW-Authenticate", refused.Challenge)
			}
			Error(w, refused.Status, refused.Msg)
			return
		}
		h(w, auth.WithPrincipal(r, p))
	})
}
