package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
	"github.com/cloudbrowser-go/cloudbrowser/internal/pages"
	"github.com/cloudbrowser-go/cloudbrowser/internal/quota"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// Quotas on a worker (docs/quotas.md). The master sends them at
// registration; browsers and sockets are counted here, per worker: a
// browser or a socket lives on the worker hosting its instance, and asking
// the master for every one would put it on the path of every page and
// socket. A user's browsers are therefore bounded by BrowsersPerUser on
// each worker their (cluster-wide bounded) instances are on.
type quotas struct {
	browserUsers *quota.Counter // browsers owned, by user
	browserIPs   *quota.Counter // browsers created, by client address
	socketIPs    *quota.Counter // client-engine sockets open, by client address
	refused      func(limit string)
}

// quotaError is a refusal by a quota, with the words for the user.
type quotaError struct {
	limit string
	msg   string
}

func (e *quotaError) Error() string { return e.msg }

func (w *Worker) limits() wire.Quotas { return *w.quotaLimits.Load() }

// reserveBrowser takes a browser place for user, created from addr; release
// gives it back (once is enough: it is idempotent).
func (w *Worker) reserveBrowser(user, addr string) (release func(), err error) {
	q := w.limits()
	uKey, err := w.take(w.quota.browserUsers, user, q.BrowsersPerUser, wire.QuotaBrowsersPerUser,
		"You already have %d virtual browsers open, the most one user may have here. "+
			"Close some of your browsers or instances (from the application's page), then try again.")
	if err != nil {
		return nil, err
	}
	ipKey, err := w.take(w.quota.browserIPs, quota.AddrKey(addr), q.BrowsersPerIP, wire.QuotaBrowsersPerIP,
		"Your network address already has %d virtual browsers open, the most one address may have here. "+
			"Close some browsers or instances (from the application's page), then try again.")
	if err != nil {
		w.quota.browserUsers.Release(uKey)
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			w.quota.browserUsers.Release(uKey)
			w.quota.browserIPs.Release(ipKey)
		})
	}, nil
}

// take acquires a place for key in c under limit. held is the key to
// release later, "" where the limit does not count key; a refusal is
// counted and worded from msgf (given the limit).
func (w *Worker) take(c *quota.Counter, key string, limit int, code, msgf string) (held string, err error) {
	held, ok := c.Take(key, limit)
	if !ok {
		w.quota.refused(code)
		return "", &quotaError{code, fmt.Sprintf(msgf, limit)}
	}
	return held, nil
}

// quotaPage answers a refusal by a quota: 429 saying which limit and what
// to do, with a link to the app's page (where instances and browsers are
// listed and closed).
func (w *Worker) quotaPage(rw http.ResponseWriter, r *http.Request, id string, app wire.App, msg string) {
	name := app.Name
	if name == "" {
		name = app.MountPoint
	}
	pages.Write(rw, r, id, pages.Page{Status: http.StatusTooManyRequests, Title: "Limit reached", Message: msg, LinkURL: "/" + app.MountPoint, LinkText: "Open " + name})
}

// quotaCode turns a refusal into the master's error code, so the message
// reaches the user through a placement.
func quotaCode(err error) error {
	var qe *quotaError
	if errors.As(err, &qe) {
		return wire.Err(wire.CodeQuota, qe.msg)
	}
	return err
}

// identify returns the visitor's id for an app without authentication. A
// visitor without one gets a new anonymous identity, unless their address
// has had too many lately (the master's token bucket, cluster-wide): then
// the request is answered 429 and ok is false. Minting identities would
// otherwise be a free way around the per-user quotas.
func (w *Worker) identify(rw http.ResponseWriter, r *http.Request, id string, app wire.App) (string, bool) {
	if user, rotate := w.users.loggedIn(r); user != "" {
		if rotate {
			w.users.login(rw, r, user)
		}
		return user, true
	}
	if user := w.users.current(r); user != "" {
		return user, true
	}
	ip := clientIP(r)
	if retry := w.newIdentityWait(r.Context(), ip); retry > 0 {
		w.log.Info().Str("request_id", id).Str("client_ip", ip).Int64("retry_after_s", retry).Msg("new anonymous identity refused: quota")
		rw.Header().Set("Retry-After", strconv.FormatInt(retry, 10))
		pages.Write(rw, r, id, pages.Page{Status: http.StatusTooManyRequests, Title: "Too many new visitors",
			Message: fmt.Sprintf("Too many new visitors came from your network address lately. Keep cookies enabled for this site "+
				"(your identity is in a cookie), or try again in %d seconds.", retry), LinkURL: "/", LinkText: "Home"})
		return "", false
	}
	user := "anon-" + ids.Random(16)
	w.users.setAnon(rw, r, user)
	return user, true
}

// newIdentityWait asks the master whether ip may get a new identity: 0 =
// yes, else seconds to wait. A master that cannot be asked (down, or older)
// does not stop visitors: the instance quotas still hold.
func (w *Worker) newIdentityWait(ctx context.Context, ip string) int64 {
	if w.client == nil || !w.registered.Load() {
		return 0 // no master to ask right now: do not make visitors wait for it
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	retry, err := contract.WorkerManagerClient{C: w.client}.NewIdentity(ctx, ip)
	if err != nil {
		if !errors.Is(err, rmi.ErrNoMethod) {
			w.log.Warn().Err(err).Msg("could not ask the master for a new identity; allowing it")
		}
		return 0
	}
	return retry
}

// admitSocket decides whether one more client-engine socket may join a
// browser that has open of them, from address addr. On refusal it returns
// the reason the client is told; else a release for when it leaves.
func (w *Worker) admitSocket(addr string, open int) (release func(), reason string) {
	q := w.limits()
	if n := q.SocketsPerBrowser; n > 0 && open >= n {
		w.quota.refused(wire.QuotaSocketsPerBrowser)
		return nil, fmt.Sprintf("This virtual browser already has %d windows connected, the most allowed. "+
			"Close some of the windows or tabs showing it, then reload this one.", n)
	}
	held, ok := w.quota.socketIPs.Take(quota.AddrKey(addr), q.SocketsPerIP)
	if !ok {
		w.quota.refused(wire.QuotaSocketsPerIP)
		return nil, fmt.Sprintf("Your network address already has %d windows connected to virtual browsers here, the most allowed. "+
			"Close some of those windows or tabs, then reload this one.", q.SocketsPerIP)
	}
	var once sync.Once
	return func() { once.Do(func() { w.quota.socketIPs.Release(held) }) }, ""
}
