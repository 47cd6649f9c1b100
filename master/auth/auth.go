// Package auth owns who may do what on the master, and the records that
// say so:
//
//   - the local user accounts and their revocations (<data-dir>/users.json
//     and revoked.json, as they always were);
//   - the per-author deploy tokens (bucket "authors" of the state store)
//     and the master's own tokens (admin, shared author, jobs, automation), with the
//     principals and roles they stand for;
//   - the logged-out sessions (bucket "ended-sessions"), the dashboard's
//     session cookie and the limits on failed logins;
//   - the RMI object the workers check logins with (Service).
//
// It knows nothing of applications, workers or HTTP routes: package master
// serves the endpoints, answers refusals, and tells the workers through the
// hooks in Config. Durable state stays in the master's one state store.
package auth

import (
	"context"
	"crypto/subtle"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/session"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

// Tokens are the master's own bearer tokens ("" = none).
type Tokens struct {
	// Admin authorizes everything; Author deploys and changes the shared
	// author's applications; Jobs only the jobs API; Automation only the
	// sessions API.
	Admin, Author, Jobs, Automation string
}

// Config configures New.
type Config struct {
	// State keeps authors and ended sessions.
	State *state.Store
	// AccountsFile keeps the accounts ("" = in memory only).
	AccountsFile string
	// Now is the clock of the login limits, revocations and author tokens.
	Now func() time.Time
	// Login limits failed logins (used as given: the caller applies
	// WithDefaults and Validate).
	Login LoginLimits
	// Secret is the cluster secret the dashboard's cookies are signed with.
	Secret string
	Tokens Tokens
	// Log is the master's logger; the components add their own field.
	Log zerolog.Logger

	// The hooks below may be nil.

	// OnRevoke tells every worker that a user's sessions were revoked.
	OnRevoke func(wire.Revocation)
	// PushEnded tells every worker that a session was logged out.
	PushEnded func(context.Context, wire.SessionRevocation)
	// OnAuthorRemoved drops what was granted to a removed author.
	OnAuthorRemoved func(name string) error
	// ObserveLogin counts login outcomes (LoginOK, ...), ObserveLockout the
	// lockouts started, by "user" or "ip".
	ObserveLogin   func(outcome string)
	ObserveLockout func(by string)
}

// Auth is the master's accounts, authors, sessions and tokens.
type Auth struct {
	tokens    Tokens
	accounts  *Accounts
	authors   *Authors
	ended     *EndedSessions
	logins    *Guard
	dashboard *Dashboard
}

// New loads the accounts and prepares the rest.
func New(cfg Config) (*Auth, error) {
	acc, err := LoadAccounts(cfg.AccountsFile, cfg.Now, cfg.OnRevoke)
	if err != nil {
		return nil, err
	}
	a := &Auth{tokens: cfg.Tokens, accounts: acc, authors: NewAuthors(cfg.State, cfg.OnAuthorRemoved)}
	a.ended = NewEndedSessions(cfg.State, cfg.Now, cfg.Log.With().Str("component", "sessions").Logger(), cfg.PushEnded)
	a.logins = NewGuard(acc.Verify, cfg.Login, cfg.Now, cfg.Log.With().Str("component", "logins").Logger(),
		cfg.ObserveLogin, cfg.ObserveLockout)
	a.dashboard = newDashboard(cfg.Secret, cfg.Tokens.Admin, a.ended)
	return a, nil
}

// Accounts are the local user accounts.
func (a *Auth) Accounts() *Accounts { return a.accounts }

// Authors are the per-author deploy tokens.
func (a *Auth) Authors() *Authors { return a.authors }

// Ended is the list of logged-out sessions.
func (a *Auth) Ended() *EndedSessions { return a.ended }

// Dashboard is the admin dashboard's session cookie.
func (a *Auth) Dashboard() *Dashboard { return a.dashboard }

// Service is the RMI object the workers check logins with.
func (a *Auth) Service() Service { return Service{g: a.logins, ended: a.ended} }

// IsAdminToken reports whether tok is the admin token.
func (a *Auth) IsAdminToken(tok string) bool { return tokenIs(tok, a.tokens.Admin) }

// Refusal is why a request is not let through, to be answered with Status
// and the message; Challenge, if set, is the WWW-Authenticate header.
type Refusal struct {
	Status    int
	Msg       string
	Challenge string
}

// Check authenticates r and requires the role need: a Bearer token (the
// admin token passes everywhere; author tokens, the shared one and
// per-author ones, everywhere but RoleAdmin; the jobs token only at
// RoleJobs and the automation token only at RoleAutomation), or, without
// one, the dashboard's cookie, which acts as the admin.
func (a *Auth) Check(r *http.Request, need Role) (Principal, *Refusal) {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok && a.dashboard.Valid(r) {
		// The dashboard's cookie. A state change also needs a header a
		// cross-site form cannot send (CSRF).
		if r.Method != http.MethodGet && r.Header.Get("X-CloudBrowser-Dashboard") != "1" {
			return Principal{}, &Refusal{Status: http.StatusForbidden, Msg: "missing X-CloudBrowser-Dashboard header"}
		}
		return AdminPrincipal, nil
	}
	if !ok || got == "" {
		return Principal{}, &Refusal{Status: http.StatusUnauthorized, Msg: "missing token (Authorization: Bearer <token>)",
			Challenge: `Bearer realm="cloudbrowser"`}
	}
	var p Principal
	if tokenIs(got, a.tokens.Admin) {
		p = AdminPrincipal
	} else if tokenIs(got, a.tokens.Author) {
		p = Principal{Name: SharedAuthor}
	} else if tokenIs(got, a.tokens.Jobs) {
		p = Principal{Name: JobsPrincipal, JobsOnly: true}
	} else if tokenIs(got, a.tokens.Automation) {
		p = Principal{Name: AutomationPrincipal, AutomationOnly: true}
	} else if name, ok := a.authors.ByToken(got); ok {
		p = Principal{Name: name}
	} else {
		return Principal{}, &Refusal{Status: http.StatusUnauthorized, Msg: "invalid token",
			Challenge: `Bearer realm="cloudbrowser", error="invalid_token"`}
	}
	if r := p.refusal(need); r != nil {
		return Principal{}, r
	}
	return p, nil
}

// refusal says why p may not act at role need (nil: it may). The two
// token-only principals pass their own role only, so neither token opens
// the other's API.
func (p Principal) refusal(need Role) *Refusal {
	switch {
	case p.JobsOnly && need != RoleJobs:
		msg := "the jobs token may only submit and read jobs, renders and monitors"
		if need == RoleAutomation {
			msg += "; automation sessions need the automation token (automation.token), an author token or the admin token"
		}
		return &Refusal{Status: http.StatusForbidden, Msg: msg}
	case p.AutomationOnly && need != RoleAutomation:
		return &Refusal{Status: http.StatusForbidden,
			Msg: "the automation token may only open, read and close automation sessions (/api/v1/sessions)"}
	case !p.Admin && need == RoleAdmin:
		return &Refusal{Status: http.StatusForbidden,
			Msg: "an author token may only deploy, list and change its own applications; this needs the admin token"}
	}
	return nil
}

func tokenIs(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// AdminCookie is the name of the dashboard's session cookie.
const AdminCookie = "cb_admin"

// Dashboard signs and checks the dashboard's session cookies. They are
// bound to the admin token (Tag), so a new token ends every dashboard
// session, and a logout ends one on every worker.
type Dashboard struct {
	codec *session.Codec
	tag   string
	ended *EndedSessions
}

func newDashboard(secret, adminToken string, ended *EndedSessions) *Dashboard {
	tag := session.TokenTag(secret, adminToken)
	return &Dashboard{codec: session.NewFor(secret, "admin-session").Bound(tag), tag: tag, ended: ended}
}

// Tag identifies the admin token the cookies are bound to, for the workers.
func (d *Dashboard) Tag() string { return d.tag }

// Valid reports whether the request carries a valid dashboard cookie:
// signed under the current admin token and not logged out.
func (d *Dashboard) Valid(r *http.Request) bool {
	_, ok := d.Claims(r)
	return ok
}

// Claims returns the claims of the request's valid dashboard cookie.
func (d *Dashboard) Claims(r *http.Request) (session.Claims, bool) {
	c, err := r.Cookie(AdminCookie)
	if err != nil {
		return session.Claims{}, false
	}
	cl, ok := d.codec.Claims(c.Value, time.Now())
	if !ok || cl.User != AdminPrincipal.Name || d.ended.IsEnded(cl.ID) {
		return session.Claims{}, false
	}
	return cl, true
}

// Issue returns the value of a new dashboard cookie.
func (d *Dashboard) Issue() string { return d.codec.Issue(AdminPrincipal.Name, time.Now()) }

// End logs out the session of cl on the master and every worker: the
// cookie is a bearer value, so clearing it in one browser is not enough.
func (d *Dashboard) End(ctx context.Context, cl session.Claims) error {
	return d.ended.End(ctx, wire.SessionRevocation{ID: cl.ID, Expires: cl.Issued.Add(d.codec.TTL).Unix()})
}
