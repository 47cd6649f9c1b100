package worker

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
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
)

type apiRequest struct {
	ID    int64           `json:"id"`
	Op    string          `json:"op"`
	Token string          `json:"token"`
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
}

type apiReply struct {
	ID     int64  `json:"id,omitempty"`
	Result any    `json:"result,omitempty"`
	Error  string `json:"error,omitempty"`
	Event  string `json:"event,omitempty"`
	Key    string `json:"key,omitempty"`
	Value  any    `json:"value,omitempty"`
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
	if len(payload) > maxStateValue+4096 || json.Unmarshal([]byte(payload), &req) != nil || req.ID <= 0 ||
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

func (a *AppManager) apiOp(vb *vbrowser, req apiRequest) (any, error) {
	in := vb.inst
	switch req.Op {
	case "get":
		in.mu.Lock()
		v, ok := in.state[req.Key]
		in.mu.Unlock()
		if !ok {
			return nil, nil
		}
		return v, nil
	case "set":
		if len(req.Key) == 0 || len(req.Key) > maxStateKey {
			return nil, fmt.Errorf("state key must be 1-%d characters", maxStateKey)
		}
		if len(req.Value) > maxStateValue {
			return nil, fmt.Errorf("state value is %d bytes, over the %d byte limit", len(req.Value), maxStateValue)
		}
		in.mu.Lock()
		if _, ok := in.state[req.Key]; !ok && len(in.state) >= maxStateKeys {
			in.mu.Unlock()
			return nil, fmt.Errorf("the instance already has %d state keys", maxStateKeys)
		}
		in.state[req.Key] = req.Value
		var targets []*vbrowser
		for _, b := range in.browsers {
			if b.subscribed(req.Key) {
				targets = append(targets, b)
			}
		}
		in.mu.Unlock()
		ev := apiReply{Event: "state", Key: req.Key, Value: req.Value}
		for _, b := range targets {
			go b.deliver(ev)
		}
		return true, nil
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
		if req.Op == "grantInstance" {
			err = in.grantInstance(vb.owner, args.Principal, role)
		} else {
			err = in.grantBrowser(vb, vb.owner, args.Principal, role)
		}
		if err != nil {
			return nil, err
		}
		return true, nil
	case "closeBrowser":
		go a.closeBrowser(in, vb, "closed by the app")
		return true, nil
	}
	return nil, fmt.Errorf("unknown operation %q", req.Op)
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
