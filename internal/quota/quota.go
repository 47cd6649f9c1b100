// Package quota holds the limiters behind the cluster's per-user and
// per-address quotas (docs/quotas.md): a bounded table of counters with a
// ceiling (instances, browsers, sockets held) and a bounded table of token
// buckets (new anonymous identities per address).
package quota

import (
	"math"
	"net/netip"
	"sync"
	"time"
)

// AddrKey is the quota key of a client address: IPv6 clients usually own a
// whole /64, so that is the unit. "" = unknown or unparsable (no
// per-address limit applies).
func AddrKey(s string) string {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return ""
	}
	a = a.Unmap()
	if a.Is4() {
		return a.String()
	}
	p, err := a.Prefix(64)
	if err != nil {
		return ""
	}
	return p.String()
}

// Counter counts what each key holds. Keys at zero are dropped, so the
// table is as large as the set of keys holding something.
type Counter struct {
	mu sync.Mutex
	n  map[string]int
}

// NewCounter returns an empty counter.
func NewCounter() *Counter { return &Counter{n: map[string]int{}} }

// Acquire takes one for key unless key already holds limit (limit <= 0 or
// key "" = no limit; nothing is counted then, and Release must not be
// called).
func (c *Counter) Acquire(key string, limit int) bool {
	if key == "" || limit <= 0 {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[key] >= limit {
		return false
	}
	c.n[key]++
	return true
}

// Add takes one for key whatever it holds: what a key already holds (an
// instance a worker re-registers) is counted even above a limit.
func (c *Counter) Add(key string) {
	if key == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[key]++
}

// Counted reports whether Acquire(key, limit) counts (and so needs a
// Release).
func Counted(key string, limit int) bool { return key != "" && limit > 0 }

// Take is Acquire that also returns what to Release later: key where it
// was counted, "" where no limit applies (Release("") does nothing).
func (c *Counter) Take(key string, limit int) (held string, ok bool) {
	if !c.Acquire(key, limit) {
		return "", false
	}
	if Counted(key, limit) {
		return key, true
	}
	return "", true
}

// Release gives one back.
func (c *Counter) Release(key string) {
	if key == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[key] <= 1 {
		delete(c.n, key)
		return
	}
	c.n[key]--
}

// Held is what key holds.
func (c *Counter) Held(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

// Len is the number of keys holding something.
func (c *Counter) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.n)
}

// Buckets is a token bucket per key: Burst tokens, refilled at Rate per
// second. The table is bounded: beyond MaxKeys the bucket touched longest
// ago is forgotten (a forgotten key starts full again, which only helps a
// client whose bucket had mostly refilled anyway).
type Buckets struct {
	Burst   float64
	Rate    float64 // tokens per second
	MaxKeys int

	mu sync.Mutex
	b  map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// NewBuckets returns an empty table; burst <= 0 disables the limit.
func NewBuckets(burst int, perMinute int, maxKeys int) *Buckets {
	return &Buckets{Burst: float64(burst), Rate: float64(perMinute) / 60, MaxKeys: maxKeys, b: map[string]*bucket{}}
}

// Take spends a token of key at now. When there is none it returns false
// and how long until there will be one.
func (t *Buckets) Take(key string, now time.Time) (bool, time.Duration) {
	if key == "" || t.Burst <= 0 {
		return true, 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	b, ok := t.b[key]
	if !ok {
		t.makeRoomLocked(now)
		b = &bucket{tokens: t.Burst, at: now}
		t.b[key] = b
	}
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(t.Burst, b.tokens+d.Seconds()*t.Rate)
		b.at = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	if t.Rate <= 0 {
		return false, time.Hour // never refills: an hour is as good a hint as any
	}
	// Whole seconds, rounded up: the wait becomes a Retry-After header.
	return false, time.Duration(math.Ceil((1-b.tokens)/t.Rate)) * time.Second
}

// makeRoomLocked forgets full buckets (they are as good as new), then the
// least recently touched, until a new key fits.
func (t *Buckets) makeRoomLocked(now time.Time) {
	if t.MaxKeys <= 0 || len(t.b) < t.MaxKeys {
		return
	}
	var oldest string
	var oldestAt time.Time
	for k, b := range t.b {
		if b.tokens+now.Sub(b.at).Seconds()*t.Rate >= t.Burst {
			delete(t.b, k)
			continue
		}
		if oldest == "" || b.at.Before(oldestAt) {
			oldest, oldestAt = k, b.at
		}
	}
	if len(t.b) >= t.MaxKeys && oldest != "" {
		delete(t.b, oldest)
	}
}

// Len is the number of keys tracked.
func (t *Buckets) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.b)
}
