package sessions

import (
	"net/http"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
)

// The admin dashboard's view of the sessions: read-only, for the master's
// cluster status (master/dashboard.go).

// Dashboard is every open session (the admin's view, as List answers it:
// a session whose instance is gone ends here too), with where it runs and
// its state from st (its workers and instances, filled), the wait queue
// and the limits, for the admin API's answer to r (public: r came to the
// public port), which decides the host of the live URLs. (A function, not
// a method: Service is near its size.)
func Dashboard(s *Service, st *wire.ClusterStatus, r *http.Request, public bool) *wire.SessionsStatus {
	base := s.host.PublicBase(r, public)
	where := make(map[string]string, len(st.Instances)) // instance -> worker
	for _, in := range st.Instances {
		where[in.ID] = in.Worker
	}
	workers := make(map[string]*wire.WorkerStatus, len(st.Workers))
	held := map[string]bool{}      // "<instance>/<browser>" an automation session holds
	connected := map[string]bool{} // of those, with a client now
	for i := range st.Workers {
		w := &st.Workers[i]
		workers[w.ID] = w
		for _, b := range w.Load.Automated {
			held[b] = true
		}
		for _, b := range w.Load.AutomationClients {
			connected[b] = true
		}
	}
	out := &wire.SessionsStatus{Sessions: []wire.SessionStatus{}, Waiting: s.Waiting(), QueueMax: s.queue.max,
		QueueWait: max(s.queue.wait, 0).String(), MaxPerPrincipal: s.max}
	for _, rec := range s.List(auth.AdminPrincipal, "") {
		wid := where[rec.InstanceID]
		if wid == "" {
			wid = rec.WorkerID // where it was placed
		}
		state := wire.SessionNoClient
		switch w, b := workers[wid], rec.InstanceID+"/"+rec.BrowserID; {
		case w == nil || w.State != "connected":
			state = wire.SessionWorkerDown
		case connected[b]:
			state = wire.SessionConnected
		case held[b]:
			state = wire.SessionKeepAlive
		}
		v := s.View(rec, base)
		out.Sessions = append(out.Sessions, wire.SessionStatus{ID: rec.ID, App: rec.App, Owner: rec.Owner,
			InstanceID: rec.InstanceID, BrowserID: rec.BrowserID, Worker: wid, CreatedAt: rec.CreatedAt, ExpiresAt: rec.ExpiresAt,
			IdleTimeout: v.IdleTimeout, KeepAlive: v.KeepAlive, LiveURL: v.LiveURL, State: state})
	}
	return out
}
