package master

import (
	"fmt"
	"reflect"

	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/quota"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// ValidateQuotas reports the first bad quota as a *config.FieldError
// naming the field of Config ("Quotas.BrowsersPerUser"). 0 disables a
// limit; negative values are refused.
func ValidateQuotas(q wire.Quotas) error {
	v := reflect.ValueOf(q)
	for i := range v.NumField() {
		if n := v.Field(i); n.Kind() == reflect.Int && n.Int() < 0 {
			return config.Errorf("Quotas."+v.Type().Field(i).Name, "must be 0 (no limit) or more, got %d", n.Int())
		}
	}
	return nil
}

// maxIdentityKeys bounds the addresses whose identity buckets are kept.
const maxIdentityKeys = 100_000

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

// reserveLocked takes a place for a new instance of owner created from
// addr; on refusal it returns the quota error. The caller releases the
// returned keys if the creation fails, or hands them to the instance.
func (m *WorkerManager) reserveInstance(owner, addr string) (userKey, ipKey string, err error) {
	q := m.quotas
	userKey, ok := m.quotaUsers.Take(owner, q.InstancesPerUser)
	if !ok {
		m.refused(wire.QuotaInstancesPerUser)
		return "", "", instanceQuotaError(wire.QuotaInstancesPerUser, q.InstancesPerUser)
	}
	ipKey, ok = m.quotaIPs.Take(quota.AddrKey(addr), q.InstancesPerIP)
	if !ok {
		m.quotaUsers.Release(userKey)
		m.refused(wire.QuotaInstancesPerIP)
		return "", "", instanceQuotaError(wire.QuotaInstancesPerIP, q.InstancesPerIP)
	}
	return userKey, ipKey, nil
}

// releaseInstance gives back what reserveInstance or an adopted instance
// took.
func (m *WorkerManager) releaseInstance(userKey, ipKey string) {
	m.quotaUsers.Release(userKey)
	m.quotaIPs.Release(ipKey)
}

func (m *WorkerManager) refused(limit string) {
	if m.observeRefusal != nil {
		m.observeRefusal(limit)
	}
}
