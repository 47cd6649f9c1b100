package worker

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/sharedstate"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/web/appapi"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
)

// The in-page app API (window.cloudbrowser). Pages call a CDP binding with
// JSON requests; the worker answers and pushes state changes by evaluating
// window.__cbDeliver(...) in the page. The instance's shared state is read
// here, on the worker hosting the instance (the colocation rule), and every
// write is stored by the master first (replica.go), so it outlives this
// worker; the page's promise resolves only after that.

// apiBinding is the binding's name.
const apiBinding = "__cbCall"

// Limits on what a page may store (internal/sharedstate; the master checks
// them again).
const (
	maxStateKeys  = sharedstate.MaxKeys
	maxStateValue = sharedstate.MaxValue
	// maxRequest bounds what the worker parses of one call: a value plus
	// room for the rest of the request.
	maxRequest = maxStateValue + 4096
)

// defaultAppendMax is append's bound when the page gives none.
const defaultAppendMax = sharedstate.DefaultAppendMax

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

// appAPI answers the app API's calls from the pages of this worker's
// browsers: it checks each call's token, reads and writes the instance's
// shared state (writes stored by the master first), and makes, lists,
// shares and closes browsers on the page's behalf.
type appAPI struct {
	w   *Worker
	log zerolog.Logger
}

// onAPICall handles one request from a page of vb. It runs on the
// browser's binding goroutine, so anything slow goes elsewhere.
func (a *appAPI) onAPICall(vb *vbrowser, payload string) {
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

func (a *appAPI) apiOp(vb *vbrowser, req apiRequest) (any, error) {
	in := vb.inst
	switch req.Op {
	case "get":
		in.mu.Lock()
		v, seq := in.state[req.Key], in.seqs[req.Key]
		in.mu.Unlock()
		return stateRead{Value: v, Seq: seq}, nil
	case "set", "append":
		write := a.setState
		if req.Op == "append" {
			write = a.appendState
		}
		res, err := write(in, req)
		if err == nil {
			a.w.snaps.Wrote(vb)
		}
		return res, err
	case "subscribe":
		vb.subMu.Lock()
		vb.subs[req.Key] = true
		vb.subMu.Unlock()
		return true, nil
	case "browsers":
		in.mu.Lock()
		out := make([]browserInfo, 0, len(in.browsers))
		for _, b := range in.browsers {
			out = append(out, browserInfo{ID: b.id, URL: b.url(), Owner: b.owner, Created: b.created, Clients: b.hub.Count()})
		}
		in.mu.Unlock()
		sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
		return out, nil
	case "createBrowser":
		ctx, cancel := context.WithTimeout(a.w.ctx, 30*time.Second)
		defer cancel()
		b, err := a.w.browsers.newBrowser(ctx, in, vb.owner, false)
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
		role, err := httpserve.ParseRole(args.Role)
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
		in.granted(target)
		return true, nil
	case "closeBrowser":
		go a.w.browsers.closeBrowser(in, vb, "closed by the app")
		return true, nil
	}
	return nil, fmt.Errorf("unknown operation %q", req.Op)
}

func checkStateKey(key string) error { return sharedstate.CheckKey(key) }

// setState stores a value: the master first (replicate), then here.
func (a *appAPI) setState(in *instance, req apiRequest) (any, error) {
	if err := checkStateKey(req.Key); err != nil {
		return nil, err
	}
	if err := sharedstate.CheckValue(req.Value); err != nil {
		return nil, err
	}
	v := req.Value
	if len(v) == 0 {
		v = json.RawMessage("null")
	}
	if err := in.checkNewKey(req.Key); err != nil {
		return nil, err
	}
	rep, err := a.w.replicate(in, wire.StateWrite{Op: wire.StateSet, Key: req.Key, Value: v})
	if err != nil {
		return nil, err
	}
	in.applyState(req.Key, v, rep.Seq)
	return true, nil
}

// appendState appends req.Value to the array at req.Key. The master does
// the append (under its per-instance lock, so concurrent appends from any
// browsers all land; set is last-writer-wins, and get-then-set from two
// pages loses one) and answers the new array, which is applied here. It
// answers the array's new length.
func (a *appAPI) appendState(in *instance, req apiRequest) (any, error) {
	if err := checkStateKey(req.Key); err != nil {
		return nil, err
	}
	limit, err := sharedstate.AppendMax(req.Max)
	if err != nil {
		return nil, err
	}
	entry := req.Value
	if len(entry) == 0 {
		entry = json.RawMessage("null")
	}
	if err := sharedstate.CheckEntry(entry); err != nil {
		return nil, err
	}
	if err := in.checkNewKey(req.Key); err != nil {
		return nil, err
	}
	rep, err := a.w.replicate(in, wire.StateWrite{Op: wire.StateAppend, Key: req.Key, Value: entry, Max: limit})
	if err != nil {
		return nil, err
	}
	in.applyState(req.Key, rep.Value, rep.Seq)
	return rep.Len, nil
}

// checkNewKey refuses a key beyond the instance's key limit early (the
// master has the last word).
func (in *instance) checkNewKey(key string) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if _, ok := in.state[key]; !ok && len(in.state) >= maxStateKeys {
		return fmt.Errorf("the instance already has %d state keys", maxStateKeys)
	}
	return nil
}

// applyState stores a value the master acknowledged with write sequence
// number seq, unless a later write of the key was applied already (replies
// of concurrent writes can arrive in any order), and tells the subscribed
// browsers.
func (in *instance) applyState(key string, v json.RawMessage, seq uint64) {
	in.mu.Lock()
	if seq <= in.seqs[key] {
		in.mu.Unlock()
		return
	}
	in.state[key], in.seqs[key] = v, seq
	var targets []*vbrowser
	for _, b := range in.browsers {
		if b.subscribed(key) {
			targets = append(targets, b)
		}
	}
	in.mu.Unlock()
	ev := apiReply{Event: "state", Key: key, Value: v, Seq: seq}
	for _, b := range targets {
		go b.deliver(ev)
	}
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
		// Not vb.hub's logger: a page calls the API while it loads,
		// before the hub exists.
		vb.inst.w.log.Debug().Str("browser", vb.id).Str("instance", vb.inst.info.ID).Err(err).Msg("app API delivery failed")
	}
}
