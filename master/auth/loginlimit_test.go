package auth

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock/clocktest"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// newFakeClock is the limiter's clock in tests: time moves only when told.
func newFakeClock() *clocktest.Clock {
	return clocktest.New(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
}

var testLimits = LoginLimits{MaxFailures: 3, MaxFailuresPerIP: 5, Window: 10 * time.Minute,
	Lockout: 30 * time.Second, MaxLockout: 2 * time.Minute, MaxKeys: 100}

// testGuard is a Guard whose accounts are alice and bob with the
// password "right", counting password checks and lockouts.
type testGuard struct {
	*Guard
	clock    *clocktest.Clock
	checks   atomic.Int64
	mu       sync.Mutex
	lockouts map[string]int
}

func newTestGuard(lim LoginLimits) *testGuard {
	tg := &testGuard{clock: newFakeClock(), lockouts: map[string]int{}}
	tg.Guard = &Guard{
		verify: func(user, password string) bool {
			tg.checks.Add(1)
			return (user == "alice" || user == "bob") && password == "right"
		},
		lim: newLoginLimiter(lim, tg.clock.Now),
		log: zerolog.Nop(),
		lockout: func(by string) {
			tg.mu.Lock()
			tg.lockouts[by]++
			tg.mu.Unlock()
		},
	}
	return tg
}

// step is one login attempt, after advancing the clock by wait.
type step struct {
	wait     time.Duration
	user, ip string
	password string
	want     wire.LoginResult
}

// wrong and right build steps; locked is the answer while locked.
func wrong(user, ip string) step { return step{user: user, ip: ip, password: "wrong"} }
func right(user, ip string) step {
	return step{user: user, ip: ip, password: "right", want: wire.LoginResult{OK: true}}
}
func locked(s step, secs int64) step { s.want = wire.LoginResult{RetryAfter: secs}; return s }
func after(d time.Duration, s step) step {
	s.wait = d
	return s
}
func times(n int, s step) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
	}
	return out
}
func seq(parts ...any) []step {
	var out []step
	for _, p := range parts {
		switch p := p.(type) {
		case step:
			out = append(out, p)
		case []step:
			out = append(out, p...)
		}
	}
	return out
}

const ip1, ip2 = "192.0.2.1", "192.0.2.2"

func TestLoginLimiter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []step
		// lockouts started, by key kind
		userLocks, ipLocks int
		// perIP is MaxFailuresPerIP (0: too high to matter, so that the
		// cases about names do not hit the address limit)
		perIP int
	}{
		{"below the threshold", seq(times(2, wrong("alice", ip1)), right("alice", ip1)), 0, 0, 0},
		{"threshold locks the name, even for the right password", seq(
			times(3, wrong("alice", ip1)),
			locked(right("alice", ip1), 30),
			locked(wrong("alice", ip2), 30),
			after(29*time.Second, locked(right("alice", ip1), 1)),
			after(500*time.Millisecond, locked(right("alice", ip1), 1)), // rounded up
			after(500*time.Millisecond, right("alice", ip1)),
		), 1, 0, 0},
		{"other names are not affected", seq(times(3, wrong("alice", ip1)), right("bob", ip1)), 1, 0, 0},
		{"unknown names are limited the same way", seq(
			times(3, wrong("nobody", ip1)), locked(wrong("nobody", ip1), 30)), 1, 0, 0},
		{"backoff doubles up to the maximum", seq(
			times(3, wrong("alice", ip1)),
			locked(wrong("alice", ip1), 30),
			after(30*time.Second, wrong("alice", ip1)), // one failure after a lockout locks again
			locked(wrong("alice", ip1), 60),
			after(60*time.Second, wrong("alice", ip1)),
			locked(wrong("alice", ip1), 120),
			after(120*time.Second, wrong("alice", ip1)),
			locked(wrong("alice", ip1), 120), // capped
		), 4, 0, 0},
		{"success resets the name", seq(
			times(2, wrong("alice", ip1)), right("alice", ip1),
			times(2, wrong("alice", ip1)), right("alice", ip1),
			times(3, wrong("alice", ip1)), locked(right("alice", ip1), 30),
		), 1, 0, 0},
		{"success after a lockout resets the backoff", seq(
			times(3, wrong("alice", ip1)),
			after(30*time.Second, right("alice", ip1)),
			times(2, wrong("alice", ip1)), right("alice", ip1),
		), 1, 0, 0},
		{"failures older than the window are forgotten", seq(
			times(2, wrong("alice", ip1)),
			after(10*time.Minute, wrong("alice", ip1)),
			wrong("alice", ip1), wrong("alice", ip1),
			locked(right("alice", ip1), 30),
		), 1, 0, 0},
		{"the backoff is forgotten a window after the lockout", seq(
			times(3, wrong("alice", ip1)),
			after(30*time.Second+10*time.Minute, wrong("alice", ip1)),
			times(2, wrong("alice", ip1)),
			locked(right("alice", ip1), 30), // 30 s again, not 60 s
		), 2, 0, 0},
		{"per address limit across names", seq(
			wrong("u1", ip1), wrong("u2", ip1), wrong("u3", ip1), wrong("u4", ip1), wrong("u5", ip1),
			locked(right("bob", ip1), 30),
			right("bob", ip2),
			after(30*time.Second, right("bob", ip1)),
		), 0, 1, 5},
		{"a success does not clear the address's count", seq(
			wrong("u1", ip1), wrong("u2", ip1), wrong("u3", ip1), wrong("u4", ip1),
			right("bob", ip1), // not counted as a failure either
			wrong("u5", ip1),
			locked(right("alice", ip1), 30),
		), 0, 1, 5},
		{"IPv6 clients are limited by /64", seq(
			wrong("u1", "2001:db8:1:2::1"), wrong("u2", "2001:db8:1:2::2"), wrong("u3", "2001:db8:1:2:aaaa::3"),
			wrong("u4", "2001:db8:1:2::4"), wrong("u5", "2001:db8:1:2::5"),
			locked(right("bob", "2001:db8:1:2::99"), 30),
			right("bob", "2001:db8:1:3::1"),
		), 0, 1, 5},
		{"IPv4-mapped addresses count as IPv4", seq(
			wrong("u1", "::ffff:192.0.2.1"), wrong("u2", ip1), wrong("u3", ip1), wrong("u4", ip1), wrong("u5", ip1),
			locked(right("bob", "::ffff:192.0.2.1"), 30),
		), 0, 1, 5},
		{"unknown address: only the name limit", seq(
			wrong("u1", ""), wrong("u2", ""), wrong("u3", ""), wrong("u4", "garbage"), wrong("u5", ""),
			right("bob", ""),
		), 0, 0, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := testLimits
			lim.MaxFailuresPerIP = 1000
			if tc.perIP > 0 {
				lim.MaxFailuresPerIP = tc.perIP
			}
			g := newTestGuard(lim)
			for i, s := range tc.steps {
				g.clock.Advance(s.wait)
				before := g.checks.Load()
				got := g.Login(context.Background(), wire.LoginRequest{User: s.user, Password: s.password, ClientIP: s.ip})
				if got != s.want {
					t.Fatalf("step %d (%s/%s from %q): got %+v, want %+v", i, s.user, s.password, s.ip, got, s.want)
				}
				// A locked attempt must not cost a password check.
				if checked := g.checks.Load() - before; (got.RetryAfter > 0) == (checked == 1) {
					t.Fatalf("step %d: %d password checks with answer %+v", i, checked, got)
				}
			}
			if g.lockouts["user"] != tc.userLocks || g.lockouts["ip"] != tc.ipLocks {
				t.Errorf("lockouts started: %v, want user %d, ip %d", g.lockouts, tc.userLocks, tc.ipLocks)
			}
		})
	}
}

// TestLoginLimiterMemoryBound: the number of tracked keys stays at MaxKeys
// (least recent failure forgotten first) and expired keys are swept.
func TestLoginLimiterMemoryBound(t *testing.T) {
	lim := testLimits
	lim.MaxKeys = 3
	g := newTestGuard(lim)
	for i := range 10 {
		g.clock.Advance(time.Second)
		g.Login(context.Background(), wire.LoginRequest{User: fmt.Sprintf("u%d", i), Password: "wrong", ClientIP: fmt.Sprintf("192.0.2.%d", i)})
		if u, ip := g.lim.tracked(); u > 3 || ip > 3 {
			t.Fatalf("after %d names: tracking %d names and %d addresses, cap 3", i+1, u, ip)
		}
	}
	for _, k := range []string{"u7", "u8", "u9"} {
		if g.lim.users.keys[k] == nil {
			t.Errorf("%s (recent) was evicted; tracked: %v", k, g.lim.users.keys)
		}
	}
	// u9 is failed again, so u7 is the oldest and goes first.
	g.Login(context.Background(), wire.LoginRequest{User: "u9", Password: "wrong"})
	g.Login(context.Background(), wire.LoginRequest{User: "new", Password: "wrong"})
	if g.lim.users.keys["u7"] != nil || g.lim.users.keys["u9"] == nil {
		t.Errorf("eviction order: tracked %v", g.lim.users.keys)
	}
	// Long names are tracked by their first 64 bytes.
	g.Login(context.Background(), wire.LoginRequest{User: strings.Repeat("x", 10_000), Password: "wrong"})
	if g.lim.users.keys[strings.Repeat("x", maxKeyLen)] == nil {
		t.Error("long name not tracked by its prefix")
	}
	// A window later everything has expired and the next attempt sweeps.
	g.clock.Advance(lim.Window + sweepEvery)
	g.Login(context.Background(), wire.LoginRequest{User: "late", Password: "wrong", ClientIP: ip1})
	if u, ip := g.lim.tracked(); u != 1 || ip != 1 {
		t.Errorf("after the sweep: tracking %d names and %d addresses, want 1 and 1", u, ip)
	}
}

// TestLoginLimiterConcurrent: guesses sent at once cannot run more password
// checks than the limit allows.
func TestLoginLimiterConcurrent(t *testing.T) {
	g := newTestGuard(testLimits)
	release := make(chan struct{})
	verify := g.verify
	g.verify = func(user, password string) bool {
		<-release // every guess is in flight before any is answered
		return verify(user, password)
	}
	var wg sync.WaitGroup
	var lockedN atomic.Int64
	const n = 50
	started := make(chan struct{}, n)
	for range n {
		wg.Go(func() {
			started <- struct{}{}
			if g.Login(context.Background(), wire.LoginRequest{User: "alice", Password: "wrong"}).RetryAfter > 0 {
				lockedN.Add(1)
			}
		})
	}
	for range n {
		<-started
	}
	close(release)
	wg.Wait()
	if c := g.checks.Load(); c != int64(testLimits.MaxFailures) {
		t.Errorf("%d password checks for %d concurrent guesses, want %d", c, n, testLimits.MaxFailures)
	}
	if lockedN.Load() != n-int64(testLimits.MaxFailures) {
		t.Errorf("%d refused as locked, want %d", lockedN.Load(), n-testLimits.MaxFailures)
	}
}

func TestLoginLimitsValidate(t *testing.T) {
	ok := DefaultLoginLimits()
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tc := range []struct {
		name  string
		edit  func(*LoginLimits)
		field string
	}{
		{"max failures", func(l *LoginLimits) { l.MaxFailures = 0 }, "Login.MaxFailures "},
		{"per ip", func(l *LoginLimits) { l.MaxFailuresPerIP = -1 }, "Login.MaxFailuresPerIP"},
		{"window", func(l *LoginLimits) { l.Window = 0 }, "Login.Window"},
		{"lockout", func(l *LoginLimits) { l.Lockout = -time.Second }, "Login.Lockout"},
		{"max below first", func(l *LoginLimits) { l.MaxLockout = l.Lockout / 2 }, "Login.MaxLockout"},
		{"keys", func(l *LoginLimits) { l.MaxKeys = -5 }, "Login.MaxKeys"},
	} {
		l := ok
		tc.edit(&l)
		if err := l.Validate(); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: error %v, want one naming %s", tc.name, err, tc.field)
		}
	}
	if d := (LoginLimits{Lockout: time.Hour}).WithDefaults(); d.MaxLockout != time.Hour || d.MaxFailures != 5 {
		t.Errorf("defaults around a long first lockout: %+v", d)
	}
}

// BenchmarkLoginGuard: what one attempt costs the master. "wrong" runs
// bcrypt (the baseline); "locked" is a guess at a locked name, answered
// without bcrypt. Compare within one run.
func BenchmarkLoginGuard(b *testing.B) {
	acc, err := LoadAccounts("", nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := acc.Add("alice", "correct-password"); err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		limits LoginLimits
	}{
		{"wrong", LoginLimits{MaxFailures: 1 << 30, MaxFailuresPerIP: 1 << 30}},
		{"locked", LoginLimits{MaxFailures: 1, MaxFailuresPerIP: 1 << 30, Lockout: time.Hour, MaxLockout: time.Hour}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			g := NewGuard(acc.Verify, tc.limits.WithDefaults(), time.Now, zerolog.Nop(), nil, nil)
			req := wire.LoginRequest{User: "alice", Password: "a guess", ClientIP: "192.0.2.1"}
			g.Login(context.Background(), req) // the first failure locks in "locked"
			for b.Loop() {
				if g.Login(context.Background(), req).OK {
					b.Fatal("a wrong password logged in")
				}
			}
		})
	}
}
