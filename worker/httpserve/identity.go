package httpserve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
	"github.com/cloudbrowser-go/cloudbrowser/internal/pages"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// The quotas' pages (docs/quotas.md): the worker counts browsers and
// sockets (its Host refuses with a QuotaError); here a refusal is answered,
// and new anonymous identities are rationed by the master.

// quotaPage answers a refusal by a quota: 429 saying which limit and what
// to do, with a link to the app's page (where instances and browsers are
// listed and closed).
func (s *Server) quotaPage(rw http.ResponseWriter, r *http.Request, id string, app wire.App, msg string) {
	name := app.Name
	if name == "" {
		name = app.MountPoint
	}
	pages.Write(rw, r, id, pages.Page{Status: http.StatusTooManyRequests, Title: "Limit reached", Message: msg, LinkURL: "/" + app.MountPoint, LinkText: "Open " + name})
}

// identify returns the visitor's id for an app without authentication. A
// visitor without one gets a new anonymous identity, unless their address
// has had too many lately (the master's token bucket, cluster-wide): then
// the request is answered 429 and ok is false. Minting identities would
// otherwise be a free way around the per-user quotas.
func (s *Server) identify(rw http.ResponseWriter, r *http.Request, id string, app wire.App) (string, bool) {
	if user, rotate := s.users.loggedIn(r); user != "" {
		if rotate {
			s.users.login(rw, r, user)
		}
		return user, true
	}
	if user := s.users.current(r); user != "" {
		return user, true
	}
	ip := clientIP(r)
	if retry := s.newIdentityWait(r.Context(), ip); retry > 0 {
		s.log.Info().Str("request_id", id).Str("client_ip", ip).Int64("retry_after_s", retry).Msg("new anonymous identity refused: quota")
		rw.Header().Set("Retry-After", strconv.FormatInt(retry, 10))
		pages.Write(rw, r, id, pages.Page{Status: http.StatusTooManyRequests, Title: "Too many new visitors",
			Message: fmt.Sprintf("Too many new visitors came from your network address lately. Keep cookies enabled for this site "+
				"(your identity is in a cookie), or try again in %d seconds.", retry), LinkURL: "/", LinkText: "Home"})
		return "", false
	}
	user := "anon-" + ids.Random(16)
	s.users.setAnon(rw, r, user)
	return user, true
}

// newIdentityWait asks the master whether ip may get a new identity: 0 =
// yes, else seconds to wait. A master that cannot be asked (down, or older)
// does not stop visitors: the instance quotas still hold.
func (s *Server) newIdentityWait(ctx context.Context, ip string) int64 {
	m := s.host.Master()
	if m == nil || !s.host.Registered() {
		return 0 // no master to ask right now: do not make visitors wait for it
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	retry, err := contract.WorkerManagerClient{C: m}.NewIdentity(ctx, ip)
	if err != nil {
		if !errors.Is(err, rmi.ErrNoMethod) {
			s.log.Warn().Err(err).Msg("could not ask the master for a new identity; allowing it")
		}
		return 0
	}
	return retry
}
