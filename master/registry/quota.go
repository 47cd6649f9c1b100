package registry

import (
	"fmt"

	"github.com/cloudbrowser-go/cloudbrowser/internal/quota"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// instanceQuotas bound the instances per user and per client address,
// cluster-wide (every placement goes through the registry). The counters
// hold reservations of creations in progress too, so concurrent
// placements cannot overshoot.
type instanceQuotas struct {
	limits     wire.Quotas
	users, ips *quota.Counter
	observe    Observer // nil: no metrics
}

// instanceQuotaError is the refusal of a new instance, with what the user
// can do about it.
func instanceQuotaError(limit string, n int) error {
	msg := fmt.Sprintf("You already have %d app instances open, the most one user may have. "+
		"Close some of your instances (from the application's page), then try again.", n)
	if limit == wire.QuotaInstancesPerIP {
		msg = fmt.Sprintf("Your network address already has %d app instances open, the most one address may have. "+
			"Close some instances (from the application's page), then try again.", n)
	}
	return wire.Err(wire.CodeQuota, msg)
}

// countsForQuota reports whether an instance of app counts against its
// owner's quota: the one shared instance of a singleAppInstance app is
// nobody's in particular.
func countsForQuota(app wire.App, ok bool) bool {
	return !ok || app.Strategy != wire.SingleAppInstance
}

// reserve takes a place for a new instance of owner created from
// addr; on refusal it returns the quota error. The caller releases the
// returned keys if the creation fails, or hands them to the instance.
func (q *instanceQuotas) reserve(owner, addr string) (userKey, ipKey string, err error) {
	lim := q.limits
	userKey, ok := q.users.Take(owner, lim.InstancesPerUser)
	if !ok {
		q.refused(wire.QuotaInstancesPerUser)
		return "", "", instanceQuotaError(wire.QuotaInstancesPerUser, lim.InstancesPerUser)
	}
	ipKey, ok = q.ips.Take(quota.AddrKey(addr), lim.InstancesPerIP)
	if !ok {
		q.users.Release(userKey)
		q.refused(wire.QuotaInstancesPerIP)
		return "", "", instanceQuotaError(wire.QuotaInstancesPerIP, lim.InstancesPerIP)
	}
	return userKey, ipKey, nil
}

// release gives back what reserve or an adopted instance
// took.
func (q *instanceQuotas) release(userKey, ipKey string) {
	q.users.Release(userKey)
	q.ips.Release(ipKey)
}

func (q *instanceQuotas) refused(limit string) {
	if q.observe != nil {
		q.observe.Refused(limit)
	}
}
