package wire

import "time"

// SessionsStatus is the automation sessions' side of ClusterStatus (the
// admin dashboard): every open session, the wait queue and the limits
// (docs/automation.md, "Limits and metrics").
type SessionsStatus struct {
	// Sessions are all principals' open sessions, oldest first.
	Sessions []SessionStatus `json:"sessions"`
	// Waiting is how many session requests wait for a browser now.
	Waiting int `json:"waiting"`
	// QueueMax bounds the waiting requests; QueueWait is how long one
	// waits at most ("0s": none waits, a request is answered at once).
	QueueMax  int    `json:"queueMax"`
	QueueWait string `json:"queueWait"`
	// MaxPerPrincipal bounds one principal's open sessions.
	MaxPerPrincipal int `json:"maxPerPrincipal"`
}

// SessionStatus is one automation session as the dashboard shows it. It
// carries no CDP ticket: the cluster status is no way to a session's
// cdpUrl.
type SessionStatus struct {
	ID         string `json:"id"`
	App        string `json:"app"`
	Owner      string `json:"owner"`
	InstanceID string `json:"instanceId"`
	BrowserID  string `json:"browserId"`
	// Worker hosts the session's instance now (after a failover too).
	Worker    string    `json:"worker"`
	CreatedAt time.Time `json:"createdAt"`
	ExpiresAt time.Time `json:"expiresAt"`
	// IdleTimeout and KeepAlive are Go durations ("5m0s").
	IdleTimeout string `json:"idleTimeout"`
	KeepAlive   string `json:"keepAlive"`
	// LiveURL is the session's Browser URL in the client engine, on the
	// public address.
	LiveURL string `json:"liveUrl"`
	// State is one of the Session* states.
	State string `json:"state"`
}

// The states of a session as its worker reports it (Load.Automated).
const (
	// SessionConnected: its client is connected (a session without
	// keep-alive is held only while it has a client).
	SessionConnected = "connected"
	// SessionKeepAlive: its client left less than its keep-alive ago and
	// may reconnect with the same cdpUrl.
	SessionKeepAlive = "keep-alive"
	// SessionNoClient: no client has connected to it on its worker yet
	// (also after a failover, until its client reconnects).
	SessionNoClient = "no-client"
	// SessionWorkerDown: its instance's worker is not connected.
	SessionWorkerDown = "worker-down"
)
