package worker

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/web/appapi"
)

// The in-page app API (window.cloudbrowser). Pages call a CDP binding with
// JSON requests; the worker answers and pushes state changes by evaluating
// window.__cbDeliver(...) in the page. The instance's shared state lives
// here, on the worker hosting the instance (the colocation rule), so a
// change reaches every browser of the instance in one round trip.

// apiBinding is the binding's name.
const apiBinding = "__cbCall"

// Limits on what a page may store: the state is in the worker's memory.
const (
	maxStateKeys  = 1024
	maxStateValue = 256 << 10
	maxStateKey   = 256
	// maxRequest bounds what the worker parses of one call: a value plus
	// room for the rest of the request.
	maxRequest = maxStateValue + 4096
)

// append keeps the last max entries: defaultAppendMax when the page gives
// none, at most maxAppendMax. The array is also trimmed from the front to
// stay within maxStateValue, so max bounds the count and the byte limit
// always holds.
const (
	defaultAppendMax = 100
	maxAppendMax     = 10000
)

// stateSeq orders writes of shared state. It is taken under the instance's
// lock, so per instance it follows the order of the writes; events are
// delivered concurrently and may arrive out of order, and the page drops
// one older than what it has already seen (see appapi.js).
var stateSeq atomic.Uint64

type apiRequest struct {
	ID    int64           `json:"id"`
	Op    string          `json:"op"`
	Token string          `json:"token"`
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
	// Max is append's bound (nil: the default). A float so that a
	// non-integer from the page gets an error rather than a dropped call.
	Max *float64 `json:"max"`
}

type apiReply struct {
	ID     int64  `json:"id,omitempty"`
	Result any    `json:"result,omitempty"`
	Error  string `json:"error,omitempty"`
	Event  string `json:"event,omitempty"`
	Key    string `json:"key,omitempty"`
	Value  any    `json:"value,omitempty"`
	Seq    uint64 `json:"seq,omitempty"`
}

// stateRead is what get answers: the value and the write sequence number
// at the time it was read.
type stateRead struct {
	Value json.RawMessage `json:"value"`
	Seq   uint64          `json:"seq"`
}

// browserInfo is what instance.browsers() returns.
type browserInfo struct {
	ID      string    `json:"id"`
	URL     string    `json:"url"`
	Owner   string    `json:"owner"`
	Created time.Time `json:"created"`
	Clients int       `json:"clients"`
}

// apiScript is the API installed in vb's pages.
func (w *Worker) apiScript(vb *vbrowser) string {
	return appapi.Script(appapi.Config{
		Binding: apiBinding, Origin: originOf(w.entryURL(vb.inst)), Token: vb.apiToken, User: vb.owner,
		AppName: vb.inst.app.Name, MountPoint: vb.inst.app.MountPoint,
		InstanceID: vb.inst.info.ID, BrowserID: vb.id, BrowserURL: vb.url(),
	})
}

// originOf is scheme://host[:port] of an absolute URL.
func originOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

func (vb *vbrowser) url() string {
	return "/" + vb.inst.app.MountPoint + "/a/" + vb.inst.info.ID + "/b/" + vb.id
}

// onAPICall handles one request from a page of vb. It runs on the
// browser's binding goroutine, so anything slow goes elsewhere.
func (a *AppManager) onAPICall(vb *vbrowser, payload string) {
	var req apiRequest
	if len(payload) > maxRequest {
		// Tell the page why rather than leave its promise pending, if the
		// request is its own.
		if req, ok := requestHead(payload); ok && req.ID > 0 && subtle.ConstantTimeCompare([]byte(req.Token), []byte(vb.apiToken)) == 1 {
			go vb.deliver(apiReply{ID: req.ID, Error: fmt.Sprintf("%s request of %d bytes is over the %d byte limit (values up to %d bytes)",
				req.Op, len(payload), maxRequest, maxStateValue)})
		}
		a.log.Debug().Str("browser", vb.id).Int("bytes", len(payload)).Msg("oversized app API call refused")
		return
	}
	if json.Unmarshal([]byte(payload), &req) != nil || req.ID <= 0 ||
		subtle.ConstantTimeCompare([]byte(req.Token), []byte(vb.apiToken)) != 1 {
		a.log.Debug().Str("browser", vb.id).Int("bytes", len(payload)).Msg("malformed or unauthenticated app API call ignored")
		return
	}
	go func() {
		res, err := a.apiOp(vb, req)
		rep := apiReply{ID: req.ID, Result: res}
		if err != nil {
			rep = apiReply{ID: req.ID, Error: err.Error()}
		}
		vb.deliver(rep)
	}()
}

// requestHead decodes id, op and token from the start of a payload without
// reading the rest; the script writes them first.
func requestHead(payload string) (apiRequest, bool) {
	var req apiRequest
	dec := json.NewDecoder(strings.NewReader(payload))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return req, false
	}
	for range 3 {
		t, err := dec.Token()
		if err != nil {
			return req, false
		}
		switch t {
		case "id":
			err = dec.Decode(&req.ID)
		case "op":
			err = dec.Decode(&req.Op)
		case "token":
			err = dec.Decode(&req.Token)
		default:
			return req, false
		}
		if err != nil {
			return req, false
		}
	}
	return req, true
}

func (a *AppManager) apiOp(vb *vbrowser, req apiRequest) (any, error) {
	in := vb.inst
	switch req.Op {
	case "get":
		in.mu.Lock()
		v := in.state[req.Key]
		seq := stateSeq.Load()
		in.mu.Unlock()
		return stateRead{Value: v, Seq: seq}, nil
	case "set":
		if err := checkStateKey(req.Key); err != nil {
			return nil, err
		}
		if len(req.Value) > maxStateValue {
			return nil, fmt.Errorf("state value is %d bytes, over the %d byte limit", len(req.Value), maxStateValue)
		}
		in.mu.Lock()
		if _, ok := in.state[req.Key]; !ok && len(in.state) >= maxStateKeys {
			in.mu.Unlock()
			return nil, fmt.Errorf("the instance already has %d state keys", maxStateKeys)
		}
		notify := in.storeState(req.Key, req.Value)
		in.mu.Unlock()
		notify()
		return true, nil
	case "append":
		return in.appendState(req)
	case "subscribe":
		vb.subMu.Lock()
		vb.subs[req.Key] = true
		vb.subMu.Unlock()
		return true, nil
	case "browsers":
		in.mu.Lock()
		out := make([]browserInfo, 0, len(in.browsers))
		for _, b := range in.browsers {
			out = append(out, browserInfo{ID: b.id, URL: b.url(), Owner: b.owner, Created: b.created, Clients: b.hub.count()})
		}
		in.mu.Unlock()
		sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
		return out, nil
	case "createBrowser":
		ctx, cancel := context.WithTimeout(a.w.ctx, 30*time.Second)
		defer cancel()
		b, err := a.newBrowser(ctx, in, vb.owner, false)
		if err != nil {
			return nil, fmt.Errorf("createBrowser: %w", err)
		}
		return browserInfo{ID: b.id, URL: b.url(), Owner: b.owner, Created: b.created}, nil
	case "grantInstance", "grantBrowser":
		var args struct {
			Principal string `json:"principal"`
			Role      string `json:"role"`
		}
		if err := json.Unmarshal(req.Value, &args); err != nil {
			return nil, fmt.Errorf("grant needs {principal, role}")
		}
		role, err := ParseRole(args.Role)
		if err != nil {
			return nil, err
		}
		var target *vbrowser // nil: the whole instance
		if req.Op == "grantInstance" {
			err = in.grantInstance(vb.owner, args.Principal, role)
		} else {
			target = vb
			err = in.grantBrowser(vb, vb.owner, args.Principal, role)
		}
		if err != nil {
			return nil, err
		}
		a.granted(a.w.ctx, in, target, args.Principal, role)
		return true, nil
	case "closeBrowser":
		go a.closeBrowser(in, vb, "closed by the app")
		return true, nil
	}
	return nil, fmt.Errorf("unknown operation %q", req.Op)
}

func checkStateKey(key string) error {
	if len(key) == 0 || len(key) > maxStateKey {
		return fmt.Errorf("state key must be 1-%d characters", maxStateKey)
	}
	return nil
}

// storeState stores a value, with in.mu held, and returns the function
// that tells the subscribed browsers, to call after unlocking.
func (in *instance) storeState(key string, v json.RawMessage) (notify func()) {
	in.state[key] = v
	seq := stateSeq.Add(1)
	var targets []*vbrowser
	for _, b := range in.browsers {
		if b.subscribed(key) {
			targets = append(targets, b)
		}
	}
	return func() {
		ev := apiReply{Event: "state", Key: key, Value: v, Seq: seq}
		for _, b := range targets {
			go b.deliver(ev)
		}
	}
}

// appendState appends req.Value to the array at req.Key under the
// instance's lock, so concurrent appends from any browsers all land (set is
// last-writer-wins, and get-then-set from two pages loses one). It answers
// the array's new length.
func (in *instance) appendState(req apiRequest) (any, error) {
	if err := checkStateKey(req.Key); err != nil {
		return nil, err
	}
	limit := defaultAppendMax
	if m := req.Max; m != nil {
		if *m != math.Trunc(*m) || *m < 1 || *m > maxAppendMax {
			return nil, fmt.Errorf("append max must be an integer from 1 to %d", maxAppendMax)
		}
		limit = int(*m)
	}
	entry := req.Value
	if len(entry) == 0 {
		entry = json.RawMessage("null")
	}
	if len(entry)+2 > maxStateValue { // +2: the brackets of a one-entry array
		return nil, fmt.Errorf("appended value is %d bytes: one entry must fit the %d byte value limit", len(entry), maxStateValue-2)
	}
	in.mu.Lock()
	cur, ok := in.state[req.Key]
	if !ok && len(in.state) >= maxStateKeys {
		in.mu.Unlock()
		return nil, fmt.Errorf("the instance already has %d state keys", maxStateKeys)
	}
	var list []json.RawMessage // a missing key or null is an empty array
	if len(cur) > 0 && json.Unmarshal(cur, &list) != nil {
		in.mu.Unlock()
		return nil, fmt.Errorf("state key %q holds a value that is not an array", req.Key)
	}
	list = append(list, entry)
	if len(list) > limit {
		list = list[len(list)-limit:]
	}
	size := 1 // "[" and "]" and a comma between entries
	for _, e := range list {
		size += len(e) + 1
	}
	for size > maxStateValue { // the last entry alone fits (checked above)
		size -= len(list[0]) + 1
		list = list[1:]
	}
	v := make(json.RawMessage, 0, size)
	v = append(v, '[')
	for i, e := range list {
		if i > 0 {
			v = append(v, ',')
		}
		v = append(v, e...)
	}
	v = append(v, ']')
	notify := in.storeState(req.Key, v)
	in.mu.Unlock()
	notify()
	return len(list), nil
}

func (vb *vbrowser) subscribed(key string) bool {
	vb.subMu.Lock()
	defer vb.subMu.Unlock()
	return vb.subs[key]
}

// deliver pushes a reply or event into the page.
func (vb *vbrowser) deliver(r apiReply) {
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The JSON is a valid JavaScript expression.
	if err := vb.b.Evaluate(ctx, "window.__cbDeliver && window.__cbDeliver("+string(b)+")", nil); err != nil {
		vb.hub.log.Debug().Err(err).Msg("app API delivery failed")
	}
}
