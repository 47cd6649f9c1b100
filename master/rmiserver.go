package master

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/secret"
	"github.com/cloudbrowser-go/cloudbrowser/master/registry"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// rmiServer is the master's RMI side: the node workers and proxies call,
// with the services registered for their roles and every call's peer
// resolved by the registry's gate, and the listener it serves.
type rmiServer struct {
	node *rmi.Node
	ln   net.Listener
}

// listenRMI creates the master's node, registers svcs on it and listens
// on cfg.RMIAddr; serve starts answering. identify resolves each call's
// connection to its peer (registry.PeerFrom).
func listenRMI(ctx context.Context, cfg Config, id string, log zerolog.Logger, identify func(*rmi.Conn) registry.Peer,
	svcs map[string]registered) (*rmiServer, error) {
	node, err := rmi.New(rmi.Config{Name: id, Secret: []byte(cfg.Secret), Logger: log,
		RoleSecrets: map[string][]byte{
			secret.RoleWorker: []byte(secret.RoleKey(cfg.Secret, secret.RoleWorker)),
			secret.RoleProxy:  []byte(secret.RoleKey(cfg.Secret, secret.RoleProxy)),
		},
		// A worker's id is proven by its own key (Register).
		NameSecret: func(role, name string) []byte {
			if role != secret.RoleWorker {
				return nil
			}
			return []byte(secret.WorkerKey(cfg.Secret, name))
		},
		// Per call, not per connection: a worker registers over its
		// connection after it is up.
		Identify: func(c *rmi.Conn) (any, error) { return identify(c), nil }})
	if err != nil {
		return nil, fmt.Errorf("master: rmi: %w", err)
	}
	s := &rmiServer{node: node}
	for name, svc := range svcs {
		if err := node.RegisterFor(name, svc.obj, svc.roles...); err != nil {
			_ = node.Close()
			return nil, fmt.Errorf("master: register %s: %w", name, err)
		}
	}
	var lc net.ListenConfig
	if s.ln, err = lc.Listen(ctx, "tcp", cfg.RMIAddr); err != nil {
		_ = node.Close()
		return nil, fmt.Errorf("master: %w", config.Errorf("RMIAddr", "%s: %w", cfg.RMIAddr, err))
	}
	return s, nil
}

// serve answers calls until ctx ends; wg counts the serving goroutine.
func (s *rmiServer) serve(ctx context.Context, wg *sync.WaitGroup, log zerolog.Logger) {
	wg.Go(func() {
		if err := s.node.Serve(ctx, s.ln); err != nil && ctx.Err() == nil {
			log.Error().Err(err).Msg("rmi server stopped")
		}
	})
}

// addr is the address workers and proxies dial ("" before Start).
func (s *rmiServer) addr() string {
	if s == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// close closes the node: its listener, connections and running calls.
func (s *rmiServer) close() error {
	if s == nil {
		return nil
	}
	_ = s.ln.Close() // not the node's until it serves
	return s.node.Close()
}
