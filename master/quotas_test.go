package master

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/internal/clock/clocktest"
	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/balance"
)

// startMasterQuotas starts a master with quotas q, on clk if not nil
// (else testConfig's fake clock).
func startMasterQuotas(t *testing.T, q wire.Quotas, clk clock.Clock) *Master {
	t.Helper()
	cfg := testConfig(balance.LeastLoad)
	cfg.Quotas = &q
	if clk != nil {
		cfg.Clock = clk
	}
	return startConfig(t, cfg)
}

// placeFrom asks for a new instance of app (whatever the strategy) for user
// from a client address.
func (f *fakeWorker) placeFrom(app, user, ip string) (wire.Placement, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return contract.WorkerManagerClient{C: f.conn}.Place(ctx, wire.PlaceRequest{App: app, User: user, ClientIP: ip, New: true, NoBrowser: true})
}

func (f *fakeWorker) closed(iid string) error {
	return contract.WorkerManagerClient{C: f.conn}.InstanceClosed(context.Background(), wire.ClosedInstance{ID: iid, Epoch: f.epoch(iid)})
}

// TestInstanceQuota: new instances are refused past the per-user and
// per-address limits with a message saying which and what to do; the shared
// instance of a singleAppInstance app is not counted; closing an instance
// frees its place; instances a worker re-registers count.
func TestInstanceQuota(t *testing.T) {
	type step struct {
		op        string // "place", "close" (the n-th placed instance), "hello"
		app, user string
		ip        string
		n         int
		refused   string // the message part expected ("" = accepted)
	}
	const userMsg = "You already have 2 app instances open"
	const ipMsg = "Your network address already has 3 app instances open"
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"per user", []step{
			{op: "place", app: "multi", user: "alice", ip: "192.0.2.1"},
			{op: "place", app: "notes", user: "alice", ip: "192.0.2.2"},
			{op: "place", app: "multi", user: "alice", ip: "192.0.2.3", refused: userMsg},
			{op: "place", app: "multi", user: "bob", ip: "192.0.2.3"},
		}},
		{"per address, whatever the identity", []step{
			{op: "place", app: "multi", user: "anon-1", ip: "192.0.2.1"},
			{op: "place", app: "multi", user: "anon-2", ip: "192.0.2.1"},
			{op: "place", app: "multi", user: "anon-3", ip: "192.0.2.1"},
			{op: "place", app: "multi", user: "anon-4", ip: "192.0.2.1", refused: ipMsg},
			{op: "place", app: "multi", user: "anon-5", ip: "192.0.2.2"},
		}},
		{"IPv6 addresses count by /64", []step{
			{op: "place", app: "multi", user: "a", ip: "2001:db8::1"},
			{op: "place", app: "multi", user: "b", ip: "2001:db8::2"},
			{op: "place", app: "multi", user: "c", ip: "2001:db8::3"},
			{op: "place", app: "multi", user: "d", ip: "2001:db8::4", refused: ipMsg},
		}},
		{"unknown address: only the per-user limit", []step{
			{op: "place", app: "multi", user: "a", ip: ""}, {op: "place", app: "multi", user: "b", ip: ""},
			{op: "place", app: "multi", user: "c", ip: ""}, {op: "place", app: "multi", user: "d", ip: ""},
		}},
		{"the shared single instance is nobody's", []step{
			{op: "hello", user: "alice", ip: "192.0.2.1"},
			{op: "place", app: "multi", user: "alice", ip: "192.0.2.1"},
			{op: "place", app: "multi", user: "alice", ip: "192.0.2.1"},
		}},
		{"closing frees the place", []step{
			{op: "place", app: "multi", user: "alice", ip: "192.0.2.1"},
			{op: "place", app: "multi", user: "alice", ip: "192.0.2.1"},
			{op: "place", app: "multi", user: "alice", ip: "192.0.2.1", refused: userMsg},
			{op: "close", n: 0},
			{op: "place", app: "multi", user: "alice", ip: "192.0.2.1"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startMasterQuotas(t, wire.Quotas{InstancesPerUser: 2, InstancesPerIP: 3}, nil)
			a := addWorker(t, m, "w-a")
			var placed []string
			for i, s := range tc.steps {
				switch s.op {
				case "close":
					if err := a.closed(placed[s.n]); err != nil {
						t.Fatalf("step %d: close: %v", i, err)
					}
					continue
				case "hello":
					s.app = "hello"
				}
				p, err := a.placeFrom(s.app, s.user, s.ip)
				if s.refused == "" {
					if err != nil {
						t.Fatalf("step %d (%s for %s from %q): %v", i, s.app, s.user, s.ip, err)
					}
					placed = append(placed, p.InstanceID)
					continue
				}
				if code(err) != wire.CodeQuota || !strings.Contains(err.Error(), s.refused) || !strings.Contains(err.Error(), "Close some") {
					t.Fatalf("step %d (%s for %s from %q): %v, want a quota refusal saying %q", i, s.app, s.user, s.ip, err, s.refused)
				}
			}
		})
	}
}

// Instances a worker brings back when it registers (a master restart) are
// counted against their owner and address.
func TestInstanceQuotaAdopted(t *testing.T) {
	m := startMasterQuotas(t, wire.Quotas{InstancesPerUser: 2, InstancesPerIP: 3}, nil)
	a := addWorker(t, m, "w-a",
		wire.InstanceInfo{ID: "w-a." + ids.Random(12), App: "multi", Owner: "alice", Worker: "w-a", ClientIP: "192.0.2.1"},
		wire.InstanceInfo{ID: "w-a." + ids.Random(12), App: "multi", Owner: "alice", Worker: "w-a", ClientIP: "192.0.2.1"},
		wire.InstanceInfo{ID: "w-a." + ids.Random(12), App: "multi", Owner: "bob", Worker: "w-a", ClientIP: "192.0.2.1"},
	)
	if _, err := a.placeFrom("multi", "alice", "192.0.2.9"); code(err) != wire.CodeQuota {
		t.Fatalf("alice past her limit with adopted instances: %v", err)
	}
	if _, err := a.placeFrom("multi", "carol", "192.0.2.1"); code(err) != wire.CodeQuota {
		t.Fatalf("an address past its limit with adopted instances: %v", err)
	}
	if _, err := a.placeFrom("multi", "carol", "192.0.2.2"); err != nil {
		t.Fatal(err)
	}
}

// TestInstanceQuotaConcurrent: concurrent placements of one user, and of
// many identities from one address, never overshoot the limits.
func TestInstanceQuotaConcurrent(t *testing.T) {
	for _, tc := range []struct {
		name  string
		user  func(i int) string
		limit int
	}{
		{"one user", func(int) string { return "alice" }, 4},
		{"one address, fresh identities", func(i int) string { return "anon-" + string(rune('a'+i)) }, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startMasterQuotas(t, wire.Quotas{InstancesPerUser: 4, InstancesPerIP: 6}, nil)
			w1, w2 := addWorker(t, m, "w-a"), addWorker(t, m, "w-b") // spread over workers: the count is cluster-wide
			var ok, refused atomic.Int64
			var wg sync.WaitGroup
			for i := range 24 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					f := w1
					if i%2 == 1 {
						f = w2
					}
					_, err := f.placeFrom("multi", tc.user(i), "198.51.100.7")
					switch code(err) {
					case "":
						ok.Add(1)
					case wire.CodeQuota:
						refused.Add(1)
					default:
						t.Errorf("placement %d: %v", i, err)
					}
				}()
			}
			wg.Wait()
			if ok.Load() != int64(tc.limit) || refused.Load() != int64(24-tc.limit) {
				t.Fatalf("%d placed, %d refused; want %d placed", ok.Load(), refused.Load(), tc.limit)
			}
			if n := w1.creates.Load() + w2.creates.Load(); n != int64(tc.limit) {
				t.Fatalf("workers created %d instances, want %d", n, tc.limit)
			}
			n := counterValue(m.metrics.refusals.WithLabelValues(wire.QuotaInstancesPerUser)) +
				counterValue(m.metrics.refusals.WithLabelValues(wire.QuotaInstancesPerIP))
			if n != float64(24-tc.limit) {
				t.Fatalf("refusals counted: %v", n)
			}
		})
	}
}

// A failed creation gives its reserved place back.
func TestInstanceQuotaFailedCreation(t *testing.T) {
	m := startMasterQuotas(t, wire.Quotas{InstancesPerUser: 1}, nil)
	a := addWorker(t, m, "w-a")
	a.fail.Store(true)
	if _, err := a.placeFrom("multi", "alice", ""); err == nil || code(err) == wire.CodeQuota {
		t.Fatalf("failing worker: %v", err)
	}
	a.fail.Store(false)
	if _, err := a.placeFrom("multi", "alice", ""); err != nil {
		t.Fatalf("after a failed creation: %v", err)
	}
}

// TestNewIdentityQuota: the token bucket of new anonymous identities per
// client address, as the workers ask it.
func TestNewIdentityQuota(t *testing.T) {
	clock := clocktest.New(time.Unix(1_000_000, 0))
	m := startMasterQuotas(t, wire.Quotas{IdentityBurst: 2, IdentitiesPerMinute: 2}, clock)
	a := addWorker(t, m, "w-a")
	ask := func(ip string) int64 {
		t.Helper()
		retry, err := contract.WorkerManagerClient{C: a.conn}.NewIdentity(context.Background(), ip)
		if err != nil {
			t.Fatal(err)
		}
		return retry
	}
	for i, tc := range []struct {
		ip      string
		advance time.Duration
		want    int64
	}{
		{"192.0.2.1", 0, 0}, {"192.0.2.1", 0, 0},
		{"192.0.2.1", 0, 30}, // a token every 30 s
		{"192.0.2.2", 0, 0},  // another address
		{"192.0.2.1", 29 * time.Second, 1},
		{"192.0.2.1", time.Second, 0},
		{"", 0, 0}, {"", 0, 0}, {"", 0, 0}, // unknown address: not limited
	} {
		clock.Advance(tc.advance)
		if got := ask(tc.ip); got != tc.want {
			t.Fatalf("ask %d (%q): retry after %d, want %d", i, tc.ip, got, tc.want)
		}
	}
	if n := counterValue(m.metrics.refusals.WithLabelValues(wire.QuotaNewIdentities)); n != 2 {
		t.Fatalf("identity refusals counted: %v, want 2", n)
	}
}

func TestValidateQuotas(t *testing.T) {
	for _, tc := range []struct {
		q    wire.Quotas
		want string
	}{
		{wire.DefaultQuotas(), ""},
		{wire.Quotas{}, ""}, // all limits off
		{wire.Quotas{InstancesPerUser: -1}, "Quotas.InstancesPerUser must be 0 (no limit) or more, got -1"},
		{wire.Quotas{SocketsPerIP: -3}, "Quotas.SocketsPerIP"},
		{wire.Quotas{IdentitiesPerMinute: -1}, "Quotas.IdentitiesPerMinute"},
	} {
		err := ValidateQuotas(tc.q)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("ValidateQuotas(%+v) = %v, want %q", tc.q, err, tc.want)
		}
	}
}

func counterValue(c prometheus.Counter) float64 {
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		panic(err)
	}
	return d.GetCounter().GetValue()
}
