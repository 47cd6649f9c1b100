package worker

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cloudbrowser-go/cloudbrowser/internal/quota"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
)

// Quotas on a worker (docs/quotas.md). The master sends them at
// registration; browsers and sockets are counted here, per worker: a
// browser or a socket lives on the worker hosting its instance, and asking
// the master for every one would put it on the path of every page and
// socket. A user's browsers are therefore bounded by BrowsersPerUser on
// each worker their (cluster-wide bounded) instances are on. Refusals are
// answered by the HTTP side (httpserve.QuotaError).
type quotas struct {
	// limits are the cluster's quotas (from the master at registration;
	// the defaults until then).
	limits       atomic.Pointer[wire.Quotas]
	browserUsers *quota.Counter // browsers owned, by user
	browserIPs   *quota.Counter // browsers created, by client address
	socketIPs    *quota.Counter // client-engine sockets open, by client address
	refused      func(limit string)
}

func (q *quotas) current() wire.Quotas { return *q.limits.Load() }

// reserveBrowser takes a browser place for user, created from addr; release
// gives it back (once is enough: it is idempotent).
func (q *quotas) reserveBrowser(user, addr string) (release func(), err error) {
	lim := q.current()
	uKey, err := q.take(q.browserUsers, user, lim.BrowsersPerUser, wire.QuotaBrowsersPerUser,
		"You already have %d virtual browsers open, the most one user may have here. "+
			"Close some of your browsers or instances (from the application's page), then try again.")
	if err != nil {
		return nil, err
	}
	ipKey, err := q.take(q.browserIPs, quota.AddrKey(addr), lim.BrowsersPerIP, wire.QuotaBrowsersPerIP,
		"Your network address already has %d virtual browsers open, the most one address may have here. "+
			"Close some browsers or instances (from the application's page), then try again.")
	if err != nil {
		q.browserUsers.Release(uKey)
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			q.browserUsers.Release(uKey)
			q.browserIPs.Release(ipKey)
		})
	}, nil
}

// take acquires a place for key in c under limit. held is the key to
// release later, "" where the limit does not count key; a refusal is
// counted and worded from msgf (given the limit).
func (q *quotas) take(c *quota.Counter, key string, limit int, code, msgf string) (held string, err error) {
	held, ok := c.Take(key, limit)
	if !ok {
		q.refused(code)
		return "", &httpserve.QuotaError{Limit: code, Msg: fmt.Sprintf(msgf, limit)}
	}
	return held, nil
}

// quotaCode turns a refusal into the master's error code, so the message
// reaches the user through a placement.
func quotaCode(err error) error {
	var qe *httpserve.QuotaError
	if errors.As(err, &qe) {
		return wire.Err(wire.CodeQuota, qe.Msg)
	}
	return err
}

// admitSocket decides whether one more client-engine socket may join a
// browser that has open of them, from address addr. On refusal it returns
// the reason the client is told; else a release for when it leaves.
func (q *quotas) admitSocket(addr string, open int) (release func(), reason string) {
	lim := q.current()
	if n := lim.SocketsPerBrowser; n > 0 && open >= n {
		q.refused(wire.QuotaSocketsPerBrowser)
		return nil, fmt.Sprintf("This virtual browser already has %d windows connected, the most allowed. "+
			"Close some of the windows or tabs showing it, then reload this one.", n)
	}
	held, ok := q.socketIPs.Take(quota.AddrKey(addr), lim.SocketsPerIP)
	if !ok {
		q.refused(wire.QuotaSocketsPerIP)
		return nil, fmt.Sprintf("Your network address already has %d windows connected to virtual browsers here, the most allowed. "+
			"Close some of those windows or tabs, then reload this one.", lim.SocketsPerIP)
	}
	var once sync.Once
	return func() { once.Do(func() { q.socketIPs.Release(held) }) }, ""
}
