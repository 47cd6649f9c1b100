package auth

import (
	"context"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// Service is the RMI object registered as wire.ObjAccounts: workers check
// logins, under the cluster-wide login limits, and report logouts.
type Service struct {
	g     *Guard
	ended *EndedSessions
}

var _ contract.Accounts = Service{}

// EndSession records a logout a worker saw and ends the session on every
// worker.
func (s Service) EndSession(ctx context.Context, rev wire.SessionRevocation) error {
	return s.ended.End(ctx, rev)
}

// Login checks a login; while the name or the client address is locked
// after repeated failures it answers RetryAfter without checking.
func (s Service) Login(ctx context.Context, req wire.LoginRequest) (wire.LoginResult, error) {
	return s.g.Login(ctx, req), nil
}

// Verify reports whether name/password is a valid login. It is kept for
// workers older than Login: the per-name limit applies (a locked name is
// refused), the per-address one cannot.
func (s Service) Verify(ctx context.Context, name, password string) (bool, error) {
	return s.g.Login(ctx, wire.LoginRequest{User: name, Password: password}).OK, nil
}
