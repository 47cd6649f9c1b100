package master

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/membership"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/registry"
)

// gossip is the master's membership in the gossip layer: the member it
// runs, and what a member's failure or departure does to the registry.
type gossip struct {
	member  *membership.Member
	log     zerolog.Logger
	workers *registry.Registry
	// events counts membership events by role and kind.
	events *prometheus.CounterVec
}

// startGossip joins the gossip layer as master id.
func startGossip(cfg Config, id string, log zerolog.Logger, workers *registry.Registry, events *prometheus.CounterVec) (*gossip, error) {
	g := &gossip{log: log, workers: workers, events: events}
	host, p, err := membership.ParseBind(cfg.GossipAddr)
	if err != nil {
		return nil, fmt.Errorf("master: %w", err)
	}
	g.member, err = membership.Start(membership.Config{
		Name: id, BindAddr: host, BindPort: p, Advertise: cfg.GossipAdvertise,
		Key: gossipKey(cfg.Secret), Label: "cloudbrowser",
		Meta:   membership.Meta{Role: membership.RoleMaster, ID: id},
		Logger: log, OnEvent: g.onMember,
	})
	if err != nil {
		return nil, fmt.Errorf("master: %w", err)
	}
	return g, nil
}

// onMember reacts to the gossip layer: a failed or departed worker is removed
// with its instances at once.
func (g *gossip) onMember(ev membership.Event) {
	ev2 := g.log.Info().Str("member", ev.Name).Str("addr", ev.Addr).Str("role", ev.Meta.Role).Str("event", ev.Kind.String())
	ev2.Msg("membership event")
	g.events.WithLabelValues(ev.Meta.Role, ev.Kind.String()).Inc()
	if ev.Meta.Role != membership.RoleWorker {
		return
	}
	switch ev.Kind {
	case membership.Failed:
		g.workers.SuspectMember(ev.Meta.ID, ev.Name, "gossip: failed")
	case membership.Left:
		g.workers.DeadMember(ev.Meta.ID, ev.Name, "gossip: left")
	}
}

// addr is the membership layer's bound address ("" before Start).
func (g *gossip) addr() string {
	if g == nil {
		return ""
	}
	return g.member.Addr()
}

// members are the gossip layer's members, for the cluster status.
func (g *gossip) members() []wire.MemberStatus {
	out := []wire.MemberStatus{}
	if g == nil {
		return out
	}
	for _, mi := range g.member.Members() {
		out = append(out, wire.MemberStatus{Name: mi.Name, Addr: mi.Addr, State: mi.State, Role: mi.Meta.Role, ID: mi.Meta.ID})
	}
	return out
}

// leave leaves the gossip layer gracefully and stops the member.
func (g *gossip) leave() {
	if g == nil {
		return
	}
	_ = g.member.Leave(time.Second)
	_ = g.member.Shutdown()
}
