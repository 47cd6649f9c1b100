package master

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
	"github.com/cloudbrowser-go/cloudbrowser/internal/sharedstate"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/apijson"
	"github.com/cloudbrowser-go/cloudbrowser/master/registry"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

// The master keeps every instance's shared state (app API set/append,
// instance grants, the instance's name) in its state store, so that it
// outlives the hosting worker: the worker applies a write and answers the
// page only after the master has committed it (docs/app-api.md,
// "Durability").
//
// Layout: one bucket per instance, "instance-state/<iid>", holding "meta"
// (write sequence, key count, name, grants) and "v/<key>" per state key
// (the value and the sequence number of its last write). One write is one
// bbolt transaction (value + meta, one fsync) and rewrites only the key it
// changes, so its cost is bounded by the 256 KiB value limit, not by the
// size of the instance's whole state.

const (
	stateBucketPrefix = "instance-state/"
	stateMetaKey      = "meta"
	stateValuePrefix  = "v/"
	// stateBrowserPrefix keys the browser snapshots: "b/<browser id>".
	stateBrowserPrefix = "b/"
	// maxSnapshotBytes bounds one stored browser snapshot (the worker
	// bounds the storage it takes to 1 MiB and the cookies to 512 KiB).
	maxSnapshotBytes = 2 << 20
	// maxSnapshots bounds the snapshots of one instance.
	maxSnapshots = 1024
	// statePageBytes bounds one Get answer, well under the RMI frame limit
	// (one value is at most 256 KiB, so a page always holds one).
	statePageBytes = 4 << 20
	// Bounds on the non-app-API writes, as the worker checks them.
	maxInstanceName = 80
	maxPrincipal    = 70
)

type stateMeta struct {
	Seq    uint64            `json:"seq"`
	Keys   int               `json:"keys"`
	Name   string            `json:"name,omitempty"`
	Grants map[string]string `json:"grants,omitempty"`
}

type storedValue struct {
	Seq uint64          `json:"s"`
	V   json.RawMessage `json:"v"`
}

// instanceStates stores instances' shared state.
type instanceStates struct {
	st *state.Store
	// checkEpoch refuses a write made under a stale placement epoch.
	checkEpoch func(iid string, epoch uint64) error
	// locks serialize the read-modify-write of one instance's writes
	// (striped: a bounded set whatever the number of instances).
	locks [64]sync.Mutex

	writes  *prometheus.CounterVec
	seconds prometheus.Histogram
}

func newInstanceStates(st *state.Store, checkEpoch func(iid string, epoch uint64) error) *instanceStates {
	s := &instanceStates{st: st, checkEpoch: checkEpoch,
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cloudbrowser_master_state_writes_total",
			Help: "Instance shared-state writes from workers, by operation (set, append, grant, name) and outcome (stored, refused).",
		}, []string{"op", "outcome"}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "cloudbrowser_master_state_write_seconds",
			Help:    "Time to store one shared-state write (read, change, one committed transaction).",
			Buckets: []float64{.0001, .0003, .001, .003, .01, .03, .1, .3, 1},
		}),
	}
	for _, op := range []string{wire.StateSet, wire.StateAppend, wire.StateGrant, wire.StateName} {
		for _, o := range []string{"stored", "refused"} {
			s.writes.WithLabelValues(op, o)
		}
	}
	return s
}

func (s *instanceStates) collectors() []prometheus.Collector {
	return []prometheus.Collector{s.writes, s.seconds}
}

func stateBucket(iid string) string { return stateBucketPrefix + iid }

func (s *instanceStates) lock(iid string) *sync.Mutex {
	h := fnv.New32a()
	h.Write([]byte(iid))
	return &s.locks[h.Sum32()%uint32(len(s.locks))]
}

func invalid(format string, a ...any) error {
	return wire.Errorf(wire.CodeInvalid, format, a...)
}

// write stores one write and answers its sequence number (and an append's
// new array).
func (s *instanceStates) write(w wire.StateWrite) (wire.StateWriteReply, error) {
	if _, ok := ids.WorkerOf(w.Instance); !ok {
		return wire.StateWriteReply{}, invalid("shared state: invalid instance id %q", w.Instance)
	}
	if err := s.checkEpoch(w.Instance, w.Epoch); err != nil {
		return wire.StateWriteReply{}, err
	}
	mu := s.lock(w.Instance)
	mu.Lock()
	defer mu.Unlock()
	bucket := stateBucket(w.Instance)
	var meta stateMeta
	if _, err := s.st.Get(bucket, stateMetaKey, &meta); err != nil {
		return wire.StateWriteReply{}, err
	}
	var rep wire.StateWriteReply
	var valKey string
	var val []byte
	switch w.Op {
	case wire.StateSet, wire.StateAppend:
		if err := sharedstate.CheckKey(w.Key); err != nil {
			return rep, invalid("%v", err)
		}
		valKey = stateValuePrefix + w.Key
		var cur storedValue
		had, err := s.st.Get(bucket, valKey, &cur)
		if err != nil {
			return rep, err
		}
		if !had && meta.Keys >= sharedstate.MaxKeys {
			return rep, invalid("the instance already has %d state keys", sharedstate.MaxKeys)
		}
		if w.Op == wire.StateSet {
			if err := sharedstate.CheckValue(w.Value); err != nil {
				return rep, invalid("%v", err)
			}
			val = w.Value
			if len(val) == 0 {
				val = []byte("null")
			}
		} else {
			limit := w.Max
			if limit == 0 {
				limit = sharedstate.DefaultAppendMax
			}
			if len(w.Value) > 0 && !json.Valid(w.Value) {
				return rep, invalid("appended value is not JSON")
			}
			v, n, err := sharedstate.Append(w.Key, cur.V, w.Value, limit)
			if err != nil {
				return rep, invalid("%v", err)
			}
			val, rep.Value, rep.Len = v, v, n
		}
		if !json.Valid(val) {
			return rep, invalid("state value is not JSON")
		}
		if !had {
			meta.Keys++
		}
	case wire.StateGrant:
		role := string(w.Value)
		if !validGrant(w.Key, role) {
			return rep, invalid("grant: %q to %q is not a role (reader, reader-writer, none) for a user name or *", role, w.Key)
		}
		grants := make(map[string]string, len(meta.Grants)+1)
		for p, r := range meta.Grants {
			grants[p] = r
		}
		if role == "none" || role == "" {
			delete(grants, w.Key)
		} else {
			grants[w.Key] = role
		}
		meta.Grants = grants
	case wire.StateName:
		name := string(w.Value)
		if len(name) > maxInstanceName || strings.ContainsAny(name, "\x00\n\r") {
			return rep, invalid("name: at most %d characters on one line", maxInstanceName)
		}
		meta.Name = name
	default:
		return rep, invalid("shared state: unknown operation %q", w.Op)
	}
	meta.Seq++
	rep.Seq = meta.Seq
	err := s.st.Update(func(tx state.Tx) error {
		if valKey != "" {
			if err := tx.Put(bucket, valKey, storedValue{Seq: meta.Seq, V: val}); err != nil {
				return err
			}
		}
		return tx.Put(bucket, stateMetaKey, meta)
	})
	if err != nil {
		return wire.StateWriteReply{}, fmt.Errorf("shared state of %s not stored: %w", w.Instance, err)
	}
	return rep, nil
}

// validGrant mirrors the worker's rules for grants.
func validGrant(principal, role string) bool {
	switch role {
	case "reader", "reader-writer", "none", "":
	default:
		return false
	}
	if principal == "*" {
		return true
	}
	if principal == "" || len(principal) > maxPrincipal {
		return false
	}
	for _, c := range principal {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// get reads one page of an instance's state: the values of the keys after
// after, in key order, up to statePageBytes.
func (s *instanceStates) get(iid, after string) (wire.InstanceState, error) {
	bucket := stateBucket(iid)
	var out wire.InstanceState
	var meta stateMeta
	found, err := s.st.Get(bucket, stateMetaKey, &meta)
	if err != nil || !found {
		return out, err
	}
	out.Found, out.Seq, out.Name, out.Grants = true, meta.Seq, meta.Name, meta.Grants
	out.Values = map[string]wire.StateValue{}
	size := 0
	var scanErr error
	s.st.Scan(bucket, stateValuePrefix+after, func(k string, raw []byte) bool {
		if !strings.HasPrefix(k, stateValuePrefix) {
			return false
		}
		if size > 0 && size+len(raw) > statePageBytes {
			out.More = true
			return false
		}
		var v storedValue
		if err := json.Unmarshal(raw, &v); err != nil {
			scanErr = fmt.Errorf("shared state %s/%s: %w", bucket, k, err)
			return false
		}
		size += len(raw)
		out.Values[strings.TrimPrefix(k, stateValuePrefix)] = wire.StateValue{Seq: v.Seq, Value: v.V}
		return true
	})
	return out, scanErr
}

// getAll reads every page.
func (s *instanceStates) getAll(iid string) (wire.InstanceState, error) {
	return wire.AllState(func(after string) (wire.InstanceState, error) { return s.get(iid, after) })
}

// saveBrowser stores or removes one browser snapshot of an instance.
func (s *instanceStates) saveBrowser(req wire.SaveBrowser) error {
	if _, ok := ids.WorkerOf(req.Instance); !ok {
		return invalid("browser snapshot: invalid instance id %q", req.Instance)
	}
	bid := req.Remove
	if req.Snapshot != nil {
		bid = req.Snapshot.ID
	}
	if !ids.ValidBrowser(bid) || (req.Snapshot != nil && req.Remove != "") {
		return invalid("browser snapshot: one valid browser id to save or remove, not %q", bid)
	}
	if err := s.checkEpoch(req.Instance, req.Epoch); err != nil {
		return err
	}
	mu := s.lock(req.Instance)
	mu.Lock()
	defer mu.Unlock()
	bucket, key := stateBucket(req.Instance), stateBrowserPrefix+bid
	if req.Snapshot == nil {
		return s.st.Delete(bucket, key)
	}
	raw, err := json.Marshal(req.Snapshot)
	if err != nil {
		return invalid("browser snapshot: %v", err)
	}
	if len(raw) > maxSnapshotBytes {
		return invalid("browser snapshot of %s is %d bytes, over %d", bid, len(raw), maxSnapshotBytes)
	}
	var had json.RawMessage
	found, err := s.st.Get(bucket, key, &had)
	if err != nil {
		return err
	}
	if !found {
		n := 0
		s.st.Scan(bucket, stateBrowserPrefix, func(k string, _ []byte) bool {
			if !strings.HasPrefix(k, stateBrowserPrefix) {
				return false
			}
			n++
			return true
		})
		if n >= maxSnapshots {
			return invalid("the instance already has %d browser snapshots", maxSnapshots)
		}
	}
	if err := s.st.Update(func(tx state.Tx) error { return tx.PutRaw(bucket, key, raw) }); err != nil {
		return fmt.Errorf("browser snapshot of %s/%s not stored: %w", req.Instance, bid, err)
	}
	return nil
}

// browsers reads one page of an instance's browser snapshots: those after
// the browser id after, in id order, up to statePageBytes.
func (s *instanceStates) browsers(iid, after string) (wire.BrowserSnapshots, error) {
	var out wire.BrowserSnapshots
	size := 0
	var scanErr error
	s.st.Scan(stateBucket(iid), stateBrowserPrefix+after, func(k string, raw []byte) bool {
		if !strings.HasPrefix(k, stateBrowserPrefix) {
			return false
		}
		if size > 0 && size+len(raw) > statePageBytes {
			out.More = true
			return false
		}
		var b wire.BrowserSnapshot
		if err := json.Unmarshal(raw, &b); err != nil {
			scanErr = fmt.Errorf("browser snapshot %s/%s: %w", iid, k, err)
			return false
		}
		size += len(raw)
		out.Browsers = append(out.Browsers, b)
		return true
	})
	return out, scanErr
}

// drop forgets an instance's state (it was closed for good).
func (s *instanceStates) drop(iid string) error {
	mu := s.lock(iid)
	mu.Lock()
	defer mu.Unlock()
	return s.st.DropBucket(stateBucket(iid))
}

// stateService is registered as wire.ObjInstanceState, for workers.
type stateService struct{ m *Master }

var _ contract.InstanceState = stateService{}

// Write stores one write of the caller's instance.
func (s stateService) Write(ctx context.Context, w wire.StateWrite) (wire.StateWriteReply, error) {
	wid, err := s.m.workers.Gate.HostedBy(w.Instance, registry.PeerFrom(ctx))
	if err != nil {
		return wire.StateWriteReply{}, err
	}
	t0 := time.Now()
	var rep wire.StateWriteReply
	rep, err = s.m.istate.write(w)
	outcome := "stored"
	if err != nil {
		outcome = "refused"
	} else {
		s.m.istate.seconds.Observe(time.Since(t0).Seconds())
	}
	switch w.Op {
	case wire.StateSet, wire.StateAppend, wire.StateGrant, wire.StateName:
		s.m.istate.writes.WithLabelValues(w.Op, outcome).Inc()
	}
	if err != nil {
		s.m.log.Debug().Str("instance", w.Instance).Str("op", w.Op).Err(err).Msg("shared-state write refused")
		return rep, err
	}
	// The table follows for landing pages: grants to named users, names.
	switch {
	case w.Op == wire.StateGrant && w.Key != "*":
		_ = s.m.workers.Share(wid, w.Instance, w.Key, string(w.Value))
	case w.Op == wire.StateName:
		_ = s.m.workers.Rename(wid, w.Instance, string(w.Value))
	}
	return rep, nil
}

// Get reads an instance's stored state, a page at a time (after: the last
// key of the previous page).
func (s stateService) Get(ctx context.Context, iid, after string) (wire.InstanceState, error) {
	p := registry.PeerFrom(ctx)
	if err := s.m.workers.Gate.MayRead(iid, p); err != nil {
		s.m.log.Warn().Str("instance", iid).Str("peer", p.Name).Err(err).Msg("shared-state read refused")
		return wire.InstanceState{}, err
	}
	return s.m.istate.get(iid, after)
}

// SaveBrowser stores (or removes) one browser snapshot of the caller's
// instance, with the same checks as Write: the caller hosts it, under the
// current epoch.
func (s stateService) SaveBrowser(ctx context.Context, req wire.SaveBrowser) error {
	if _, err := s.m.workers.Gate.HostedBy(req.Instance, registry.PeerFrom(ctx)); err != nil {
		return err
	}
	if err := s.m.istate.saveBrowser(req); err != nil {
		s.m.log.Debug().Str("instance", req.Instance).Err(err).Msg("browser snapshot refused")
		return err
	}
	return nil
}

// Browsers reads an instance's browser snapshots, a page at a time
// (after: the last browser id of the previous page).
func (s stateService) Browsers(ctx context.Context, iid, after string) (wire.BrowserSnapshots, error) {
	p := registry.PeerFrom(ctx)
	if err := s.m.workers.Gate.MayRead(iid, p); err != nil {
		s.m.log.Warn().Str("instance", iid).Str("peer", p.Name).Err(err).Msg("browser snapshot read refused")
		return wire.BrowserSnapshots{}, err
	}
	return s.m.istate.browsers(iid, after)
}

// stateView is the admin API's view of an instance's stored state.
type stateView struct {
	Instance string                   `json:"instance"`
	Found    bool                     `json:"found"`
	Seq      uint64                   `json:"seq"`
	Name     string                   `json:"name,omitempty"`
	Grants   map[string]string        `json:"grants,omitempty"`
	Values   map[string]stateViewItem `json:"values"`
	// Browsers are the instance's browser snapshots (failover), without
	// their cookies and storage.
	Browsers []browserView `json:"browsers"`
}

type browserView struct {
	ID     string    `json:"id"`
	Owner  string    `json:"owner"`
	URL    string    `json:"url"`
	Taken  time.Time `json:"taken"`
	Local  int       `json:"localStorageKeys"`
	Cookie int       `json:"cookies"`
}

type stateViewItem struct {
	Seq   uint64          `json:"seq"`
	Value json.RawMessage `json:"value"`
}

// instanceState answers GET /api/v1/instances/{id}/state.
func (api *adminAPI) instanceState(w http.ResponseWriter, r *http.Request) {
	iid := r.PathValue("id")
	if _, ok := ids.WorkerOf(iid); !ok {
		apijson.Error(w, http.StatusBadRequest, fmt.Sprintf("instance id %q: not an instance id (<worker>.<random>)", iid))
		return
	}
	st, err := api.istate.getAll(iid)
	if err != nil {
		apijson.Error(w, http.StatusInternalServerError, err.Error())
		return
	}
	v := stateView{Instance: iid, Found: st.Found, Seq: st.Seq, Name: st.Name, Grants: st.Grants, Values: map[string]stateViewItem{}}
	for k, sv := range st.Values {
		v.Values[k] = stateViewItem{Seq: sv.Seq, Value: sv.Value}
	}
	v.Browsers = []browserView{}
	for after := ""; ; {
		page, err := api.istate.browsers(iid, after)
		if err != nil {
			apijson.Error(w, http.StatusInternalServerError, err.Error())
			return
		}
		for _, b := range page.Browsers {
			v.Browsers = append(v.Browsers, browserView{ID: b.ID, Owner: b.Owner, URL: b.URL, Taken: b.Taken, Local: len(b.Local), Cookie: len(b.Cookies)})
			after = b.ID
		}
		if !page.More || len(page.Browsers) == 0 {
			break
		}
	}
	// An instance may have browser snapshots and no shared state, or be
	// live with neither yet: only one the master knows nothing of is 404.
	if !st.Found && len(v.Browsers) == 0 && !api.workers.Known(iid) {
		apijson.Error(w, http.StatusNotFound, "no stored state for instance "+iid)
		return
	}
	apijson.Write(w, http.StatusOK, v)
}
