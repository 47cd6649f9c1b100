package cdpgate

import (
	"fmt"
	"slices"
	"sync"
)

// owned is what the session may touch: its contexts and the targets,
// sessions, windows and downloads seen in them. The client goroutine and
// the upstream reader share it.
type owned struct {
	mu        sync.Mutex
	primary   string
	created   map[string]bool // contexts the client created and has not disposed
	targets   map[string]bool // targets seen in an owned context
	sessions  map[string]bool // attached sessions to owned targets
	waiting   map[string]bool // of those, paused until Runtime.runIfWaitingForDebugger
	windows   map[int64]bool  // from Browser.getWindowForTarget on owned targets
	downloads map[string]bool // guids of downloads begun in owned pages
	browsers  []string        // the gate's browser sessions (Target.attachToBrowserTarget), in order
	nextID    int
}

func newOwned(primary string) *owned {
	return &owned{primary: primary, created: map[string]bool{}, targets: map[string]bool{},
		sessions: map[string]bool{}, waiting: map[string]bool{}, windows: map[int64]bool{},
		downloads: map[string]bool{}}
}

// context reports whether id is the primary or a live client context.
func (o *owned) context(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return id != "" && (id == o.primary || o.created[id])
}

func (o *owned) isCreated(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.created[id]
}

func (o *owned) addContext(id string) {
	o.mu.Lock()
	o.created[id] = true
	o.mu.Unlock()
}

func (o *owned) removeContext(id string) {
	o.mu.Lock()
	delete(o.created, id)
	o.mu.Unlock()
}

func (o *owned) createdContexts() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	ids := make([]string, 0, len(o.created))
	for id := range o.created {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// claimTarget records target id if browserContext is owned and reports
// whether it is.
func (o *owned) claimTarget(id, browserContext string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if browserContext == "" || (browserContext != o.primary && !o.created[browserContext]) {
		return false
	}
	o.targets[id] = true
	return true
}

func (o *owned) target(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.targets[id]
}

func (o *owned) removeTarget(id string) {
	o.mu.Lock()
	delete(o.targets, id)
	o.mu.Unlock()
}

func (o *owned) addSession(id string, waiting bool) {
	o.mu.Lock()
	o.sessions[id] = true
	if waiting {
		o.waiting[id] = true
	}
	o.mu.Unlock()
}

func (o *owned) session(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.sessions[id]
}

func (o *owned) removeSession(id string) {
	o.mu.Lock()
	delete(o.sessions, id)
	delete(o.waiting, id)
	o.mu.Unlock()
}

// resumed notes that the client resumed a paused session.
func (o *owned) resumed(id string) {
	o.mu.Lock()
	delete(o.waiting, id)
	o.mu.Unlock()
}

func (o *owned) waitingSessions() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	ids := make([]string, 0, len(o.waiting))
	for id := range o.waiting {
		ids = append(ids, id)
	}
	return ids
}

func (o *owned) addWindow(id int64) {
	o.mu.Lock()
	o.windows[id] = true
	o.mu.Unlock()
}

func (o *owned) window(id int64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.windows[id]
}

// download records (begin) or checks a download's guid; a finished one is
// forgotten.
func (o *owned) download(guid string, begin, finished bool) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if begin {
		o.downloads[guid] = true
	}
	ok := o.downloads[guid]
	if finished {
		delete(o.downloads, guid)
	}
	return ok
}

// addBrowserSession makes a browser session of the gate's own.
func (o *owned) addBrowserSession() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.nextID++
	id := fmt.Sprintf("CLOUDBROWSER-BROWSER-%d", o.nextID)
	o.browsers = append(o.browsers, id)
	return id
}

func (o *owned) browserSession(id string) bool {
	if id == "" {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Contains(o.browsers, id)
}

// removeBrowserSession reports whether id was one.
func (o *owned) removeBrowserSession(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	i := slices.Index(o.browsers, id)
	if i < 0 {
		return false
	}
	o.browsers = slices.Delete(o.browsers, i, i+1)
	return true
}

func (o *owned) browserSessions() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.browsers)
}
