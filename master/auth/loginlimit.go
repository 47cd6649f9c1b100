package auth

import (
	"container/list"
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/quota"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// LoginLimits bound failed logins (brute-force protection). The master
// applies them for the whole cluster, since every worker asks it to check
// passwords. Zero fields take the defaults of DefaultLoginLimits.
type LoginLimits struct {
	// MaxFailures for one user name within Window lock that name.
	MaxFailures int
	// MaxFailuresPerIP for one client address (IPv6: its /64) within
	// Window lock the address.
	MaxFailuresPerIP int
	// Window: failures are counted for this long from the first one. A
	// name or address is forgotten Window after its last failure or the
	// end of its last lockout, whichever is later.
	Window time.Duration
	// Lockout is the first lockout. Every failure after a lockout, before
	// the key is forgotten, locks again for twice as long, up to MaxLockout.
	Lockout, MaxLockout time.Duration
	// MaxKeys bounds the names and the addresses tracked (each); beyond it
	// the one whose last failure is oldest is forgotten.
	MaxKeys int
}

// DefaultLoginLimits are the limits used unless configured.
func DefaultLoginLimits() LoginLimits {
	return LoginLimits{MaxFailures: 5, MaxFailuresPerIP: 30, Window: 15 * time.Minute,
		Lockout: 30 * time.Second, MaxLockout: 15 * time.Minute, MaxKeys: 100_000}
}

// WithDefaults returns l with its zero fields set to DefaultLoginLimits.
func (l LoginLimits) WithDefaults() LoginLimits {
	d := DefaultLoginLimits()
	if l.MaxFailures == 0 {
		l.MaxFailures = d.MaxFailures
	}
	if l.MaxFailuresPerIP == 0 {
		l.MaxFailuresPerIP = d.MaxFailuresPerIP
	}
	if l.Window == 0 {
		l.Window = d.Window
	}
	if l.Lockout == 0 {
		l.Lockout = d.Lockout
	}
	if l.MaxLockout == 0 {
		l.MaxLockout = max(d.MaxLockout, l.Lockout)
	}
	if l.MaxKeys == 0 {
		l.MaxKeys = d.MaxKeys
	}
	return l
}

// Validate reports the first bad limit as a *config.FieldError naming the
// field of Config ("Login.Window").
func (l LoginLimits) Validate() error {
	switch {
	case l.MaxFailures < 1:
		return config.Errorf("Login.MaxFailures", "must be at least 1, got %d", l.MaxFailures)
	case l.MaxFailuresPerIP < 1:
		return config.Errorf("Login.MaxFailuresPerIP", "must be at least 1, got %d", l.MaxFailuresPerIP)
	case l.Window <= 0:
		return config.Errorf("Login.Window", "must be positive, got %v", l.Window)
	case l.Lockout <= 0:
		return config.Errorf("Login.Lockout", "must be positive, got %v", l.Lockout)
	case l.MaxLockout < l.Lockout:
		return config.Errorf("Login.MaxLockout", "(%v) must be at least the lockout (%v)", l.MaxLockout, l.Lockout)
	case l.MaxKeys < 1:
		return config.Errorf("Login.MaxKeys", "must be at least 1, got %d", l.MaxKeys)
	}
	return nil
}

// backoff is the length of lockout number n (0-based).
func (l LoginLimits) backoff(n int) time.Duration {
	d := l.Lockout
	for ; n > 0 && d < l.MaxLockout; n-- {
		d *= 2
	}
	return min(d, l.MaxLockout)
}

// maxKeyLen bounds the memory a tracked user name takes: longer names are
// not valid account names anyway.
const maxKeyLen = 64

// sweepEvery is how often expired keys are dropped (lazily, on an attempt).
const sweepEvery = time.Minute

// failures is the record of one user name or address.
type failures struct {
	key    string
	count  int       // failures since first
	first  time.Time // start of the counting window
	last   time.Time // latest failure
	streak int       // lockouts so far; the next one lasts backoff(streak)
	until  time.Time // locked until
	elem   *list.Element
}

func (e *failures) expiry(window time.Duration) time.Time {
	if e.until.After(e.last) {
		return e.until.Add(window)
	}
	return e.last.Add(window)
}

// failureTable tracks one kind of key.
type failureTable struct {
	lim   *LoginLimits
	max   int // failures that lock
	keys  map[string]*failures
	order *list.List // of *failures, least recent failure first
}

func newFailureTable(lim *LoginLimits, maxFailures int) *failureTable {
	return &failureTable{lim: lim, max: maxFailures, keys: map[string]*failures{}, order: list.New()}
}

// get returns key's live record, or nil.
func (t *failureTable) get(key string, now time.Time) *failures {
	e := t.keys[key]
	if e != nil && !now.Before(e.expiry(t.lim.Window)) {
		t.remove(e)
		return nil
	}
	return e
}

func (t *failureTable) remove(e *failures) {
	t.order.Remove(e.elem)
	delete(t.keys, e.key)
}

// fail counts a failure and returns the lockout it started (0 = none).
func (t *failureTable) fail(key string, now time.Time) time.Duration {
	e := t.get(key, now)
	switch {
	case e == nil:
		for len(t.keys) >= t.lim.MaxKeys {
			t.remove(t.order.Front().Value.(*failures))
		}
		e = &failures{key: key, first: now}
		e.elem = t.order.PushBack(e)
		t.keys[key] = e
	case e.streak == 0 && !now.Before(e.first.Add(t.lim.Window)):
		e.count, e.first = 0, now
	}
	e.count++
	e.last = now
	t.order.MoveToBack(e.elem)
	if e.count < t.max {
		return 0
	}
	d := t.lim.backoff(e.streak)
	e.streak++
	e.until = now.Add(d)
	return d
}

// undo takes back a failure counted up front for an attempt that
// succeeded, and the lockout it started, if any.
func (t *failureTable) undo(key string, startedLock bool) {
	e := t.keys[key]
	if e == nil {
		return
	}
	e.count = max(e.count-1, 0)
	if startedLock && e.streak > 0 {
		e.streak--
		e.until = time.Time{}
	}
}

func (t *failureTable) sweep(now time.Time) {
	for el := t.order.Front(); el != nil; {
		next := el.Next()
		if e := el.Value.(*failures); !now.Before(e.expiry(t.lim.Window)) {
			t.remove(e)
		}
		el = next
	}
}

// loginLimiter keeps the failed logins per user name and per client
// address. It is pure bookkeeping with an injectable clock.
type loginLimiter struct {
	lim LoginLimits
	now func() time.Time

	mu        sync.Mutex
	users     *failureTable
	ips       *failureTable
	lastSweep time.Time
}

func newLoginLimiter(lim LoginLimits, now func() time.Time) *loginLimiter {
	l := &loginLimiter{lim: lim, now: now}
	l.users = newFailureTable(&l.lim, lim.MaxFailures)
	l.ips = newFailureTable(&l.lim, lim.MaxFailuresPerIP)
	return l
}

// ticket is a login attempt in progress.
type ticket struct {
	user, ip         string
	userLock, ipLock time.Duration // lockouts the attempt started, if it fails
}

// attempt asks whether user may try to log in from ip ("" = unknown). While
// the name or the address is locked it returns the time left, and the
// password must not be checked. Otherwise the attempt is counted as a
// failure right away, so that concurrent guesses cannot overshoot the limit;
// succeeded takes that back.
func (l *loginLimiter) attempt(user, ip string) (ticket, time.Duration) {
	if len(user) > maxKeyLen {
		user = user[:maxKeyLen]
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) >= sweepEvery {
		l.users.sweep(now)
		l.ips.sweep(now)
		l.lastSweep = now
	}
	var wait time.Duration
	if e := l.users.get(user, now); e != nil && now.Before(e.until) {
		wait = e.until.Sub(now)
	}
	if ip != "" {
		if e := l.ips.get(ip, now); e != nil && now.Before(e.until) {
			wait = max(wait, e.until.Sub(now))
		}
	}
	if wait > 0 {
		return ticket{}, wait
	}
	t := ticket{user: user, ip: ip, userLock: l.users.fail(user, now)}
	if ip != "" {
		t.ipLock = l.ips.fail(ip, now)
	}
	return t, 0
}

// succeeded settles a successful attempt: the name starts afresh (its owner
// is here); the address only loses this attempt's count, so that logging in
// to one's own account does not clear guesses at others.
func (l *loginLimiter) succeeded(t ticket) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.users.keys[t.user]; e != nil {
		l.users.remove(e)
	}
	if t.ip != "" {
		l.ips.undo(t.ip, t.ipLock > 0)
	}
}

// tracked returns the number of names and addresses tracked.
func (l *loginLimiter) tracked() (users, ips int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.users.keys), len(l.ips.keys)
}

// Outcomes of a login check, for the metrics.
const (
	LoginOK     = "ok"
	LoginFailed = "failed"
	LoginLocked = "locked"
)

// Guard checks logins for the workers under the limits.
type Guard struct {
	verify func(user, password string) bool
	lim    *loginLimiter
	log    zerolog.Logger
	// observe counts outcomes; lockout counts lockouts started, by "user"
	// or "ip". Either may be nil.
	observe func(outcome string)
	lockout func(by string)
}

// NewGuard checks passwords with verify under lim, with now as its clock;
// observe counts outcomes and lockout the lockouts started (either may be
// nil).
func NewGuard(verify func(user, password string) bool, lim LoginLimits, now func() time.Time, log zerolog.Logger,
	observe func(outcome string), lockout func(by string)) *Guard {
	return &Guard{verify: verify, lim: newLoginLimiter(lim, now), log: log, observe: observe, lockout: lockout}
}

// Login checks a login; while the name or the client address is locked
// after repeated failures it answers RetryAfter without checking.
func (g *Guard) Login(ctx context.Context, req wire.LoginRequest) wire.LoginResult {
	ip := quota.AddrKey(req.ClientIP)
	t, wait := g.lim.attempt(req.User, ip)
	if wait > 0 {
		// The password is not checked: a correct guess must look like any
		// other, and bcrypt time is not spent on a locked key.
		g.count(LoginLocked)
		g.log.Debug().Str("request_id", req.RequestID).Str("user", req.User).Str("client_ip", ip).
			Dur("retry_after", wait).Msg("login refused while locked")
		return wire.LoginResult{RetryAfter: retrySeconds(wait)}
	}
	if ctx.Err() != nil {
		// The worker gave up; do not spend bcrypt time. The counted failure
		// stays: a guess sent is a guess.
		return wire.LoginResult{}
	}
	if g.verify(req.User, req.Password) {
		g.lim.succeeded(t)
		g.count(LoginOK)
		return wire.LoginResult{OK: true}
	}
	g.count(LoginFailed)
	for _, l := range []struct {
		by  string
		d   time.Duration
		key string
	}{{"user", t.userLock, t.user}, {"ip", t.ipLock, t.ip}} {
		if l.d == 0 {
			continue
		}
		if g.lockout != nil {
			g.lockout(l.by)
		}
		g.log.Warn().Str("request_id", req.RequestID).Str("by", l.by).Str("user", req.User).
			Str("client_ip", ip).Dur("lockout", l.d).Msg("login locked after repeated failures")
	}
	return wire.LoginResult{}
}

func (g *Guard) count(outcome string) {
	if g.observe != nil {
		g.observe(outcome)
	}
}

// retrySeconds rounds a wait up to whole seconds (Retry-After's unit).
func retrySeconds(d time.Duration) int64 {
	return max(int64((d+time.Second-1)/time.Second), 1)
}
