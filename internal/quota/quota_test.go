package quota

import (
	"sync"
	"testing"
	"time"
)

func TestAddrKey(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"192.0.2.7", "192.0.2.7"},
		{"::ffff:192.0.2.7", "192.0.2.7"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"}, // same /64: same key
		{"", ""},
		{"not an address", ""},
	} {
		if got := AddrKey(tc.in); got != tc.want {
			t.Errorf("AddrKey(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestCounter(t *testing.T) {
	type step struct {
		op    string // "acquire", "add", "release"
		key   string
		limit int
		want  bool // for acquire
		held  int  // key's count after the step
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"up to the limit, then refused", []step{
			{"acquire", "a", 2, true, 1}, {"acquire", "a", 2, true, 2}, {"acquire", "a", 2, false, 2},
		}},
		{"release frees one", []step{
			{"acquire", "a", 1, true, 1}, {"acquire", "a", 1, false, 1}, {"release", "a", 1, false, 0}, {"acquire", "a", 1, true, 1},
		}},
		{"keys are independent", []step{
			{"acquire", "a", 1, true, 1}, {"acquire", "b", 1, true, 1}, {"acquire", "a", 1, false, 1},
		}},
		{"no limit counts nothing", []step{
			{"acquire", "a", 0, true, 0}, {"acquire", "a", -1, true, 0},
		}},
		{"unknown key is not limited", []step{
			{"acquire", "", 1, true, 0}, {"acquire", "", 1, true, 0},
		}},
		{"add counts above the limit", []step{
			{"add", "a", 1, false, 1}, {"add", "a", 1, false, 2}, {"acquire", "a", 1, false, 2}, {"release", "a", 1, false, 1}, {"release", "a", 1, false, 0},
		}},
		{"release below zero stays at zero", []step{
			{"release", "a", 1, false, 0}, {"acquire", "a", 1, true, 1},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCounter()
			for i, s := range tc.steps {
				switch s.op {
				case "acquire":
					if got := c.Acquire(s.key, s.limit); got != s.want {
						t.Fatalf("step %d: Acquire(%q, %d) = %v, want %v", i, s.key, s.limit, got, s.want)
					}
				case "add":
					c.Add(s.key)
				case "release":
					c.Release(s.key)
				}
				if got := c.Held(s.key); got != s.held {
					t.Fatalf("step %d: Held(%q) = %d, want %d", i, s.key, got, s.held)
				}
			}
		})
	}
}

func TestCounterTake(t *testing.T) {
	for _, tc := range []struct {
		name      string
		key       string
		limit     int
		heldFirst int // the key's count before Take
		wantHeld  string
		wantOK    bool
		heldAfter int
	}{
		{"counted", "a", 2, 0, "a", true, 1},
		{"at the limit", "a", 1, 1, "", false, 1},
		{"no limit: nothing to release", "a", 0, 0, "", true, 0},
		{"unknown key: nothing to release", "", 1, 0, "", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCounter()
			for range tc.heldFirst {
				c.Add(tc.key)
			}
			held, ok := c.Take(tc.key, tc.limit)
			if held != tc.wantHeld || ok != tc.wantOK {
				t.Fatalf("Take(%q, %d) = %q, %v, want %q, %v", tc.key, tc.limit, held, ok, tc.wantHeld, tc.wantOK)
			}
			if got := c.Held(tc.key); got != tc.heldAfter {
				t.Fatalf("Held(%q) = %d, want %d", tc.key, got, tc.heldAfter)
			}
			c.Release(held)
			if got := c.Held(tc.key); got != tc.heldFirst {
				t.Fatalf("after Release(held): Held(%q) = %d, want %d", tc.key, got, tc.heldFirst)
			}
		})
	}
}

// Concurrent acquisitions never overshoot the limit.
func TestCounterConcurrent(t *testing.T) {
	c := NewCounter()
	const limit = 7
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c.Acquire("k", limit) {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if ok != limit || c.Held("k") != limit {
		t.Fatalf("%d acquisitions succeeded, %d held; want %d", ok, c.Held("k"), limit)
	}
}

func TestBuckets(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	type take struct {
		key   string
		at    time.Duration // after t0
		ok    bool
		retry time.Duration // when refused
	}
	for _, tc := range []struct {
		name             string
		burst, perMinute int
		takes            []take
	}{
		{"burst then refused with the refill time", 3, 60, []take{
			{"a", 0, true, 0}, {"a", 0, true, 0}, {"a", 0, true, 0}, {"a", 0, false, time.Second},
		}},
		{"refills at the rate", 1, 6, []take{ // one every 10 s
			{"a", 0, true, 0}, {"a", 4 * time.Second, false, 6 * time.Second}, {"a", 10 * time.Second, true, 0},
		}},
		{"refill is capped at the burst", 2, 60, []take{
			{"a", 0, true, 0}, {"a", 0, true, 0}, {"a", time.Hour, true, 0}, {"a", time.Hour, true, 0}, {"a", time.Hour, false, time.Second},
		}},
		{"addresses are independent", 1, 1, []take{
			{"a", 0, true, 0}, {"b", 0, true, 0}, {"a", 0, false, 60 * time.Second},
		}},
		{"unknown address is not limited", 1, 1, []take{
			{"", 0, true, 0}, {"", 0, true, 0},
		}},
		{"burst 0 disables", 0, 1, []take{
			{"a", 0, true, 0}, {"a", 0, true, 0},
		}},
		{"rate 0: never refills", 1, 0, []take{
			{"a", 0, true, 0}, {"a", 24 * time.Hour, false, time.Hour},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBuckets(tc.burst, tc.perMinute, 100)
			for i, tk := range tc.takes {
				ok, retry := b.Take(tk.key, t0.Add(tk.at))
				if ok != tk.ok || (!ok && retry != tk.retry) {
					t.Fatalf("take %d (%q at %v): %v, retry %v; want %v, retry %v", i, tk.key, tk.at, ok, retry, tk.ok, tk.retry)
				}
			}
		})
	}
}

// The table stays bounded: refilled buckets are forgotten first (they are
// as good as new), then the least recently touched.
func TestBucketsBounded(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	b := NewBuckets(1, 60, 3)      // one token, one per second
	b.Take("old", at(0))           // refilled by 2 s
	b.Take("x", at(2*time.Second)) // empty
	b.Take("y", at(2*time.Second)) // empty
	b.Take("z", at(2*time.Second)) // no room: "old" is full, so it goes
	if b.Len() != 3 {
		t.Fatalf("%d keys tracked, want 3", b.Len())
	}
	if ok, _ := b.Take("x", at(2*time.Second+time.Microsecond)); ok {
		t.Fatal("x's empty bucket was forgotten instead of the refilled one")
	}
	// All empty now: the least recently touched (y or z; x was just
	// touched) goes.
	b.Take("w", at(2*time.Second+time.Millisecond))
	if b.Len() != 3 {
		t.Fatalf("%d keys tracked, want 3", b.Len())
	}
	if ok, _ := b.Take("x", at(2*time.Second+time.Millisecond)); ok {
		t.Fatal("x (recently used) was forgotten")
	}
}
