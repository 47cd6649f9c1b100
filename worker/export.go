package worker

import (
	"context"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// workerApps is what the worker exports to the master when it registers:
// exactly contract.WorkerApps. Exporting the Application Manager itself
// would make every exported method of it remotely callable, including ones
// the master must not use (OpenBrowser skips the per-address quota).
type workerApps struct{ a *AppManager }

var _ contract.WorkerApps = workerApps{}

func (x workerApps) AddApplication(ctx context.Context, app wire.App) error {
	return x.a.AddApplication(ctx, app)
}

func (x workerApps) RemoveApplication(ctx context.Context, name string) error {
	return x.a.RemoveApplication(ctx, name)
}

func (x workerApps) CreateInstance(ctx context.Context, req wire.CreateInstance) error {
	return x.a.CreateInstance(ctx, req)
}

func (x workerApps) CloseInstance(ctx context.Context, c wire.ClosedInstance) error {
	return x.a.CloseInstance(ctx, c)
}

func (x workerApps) SnapshotInstance(ctx context.Context, iid string) error {
	return x.a.SnapshotInstance(ctx, iid)
}

func (x workerApps) ResumeInstance(ctx context.Context, iid string) error {
	return x.a.ResumeInstance(ctx, iid)
}

func (x workerApps) ReleaseInstance(ctx context.Context, f wire.FencedInstance) error {
	return x.a.ReleaseInstance(ctx, f)
}

func (x workerApps) OpenBrowserFor(ctx context.Context, req wire.OpenBrowser) (string, error) {
	return x.a.OpenBrowserFor(ctx, req)
}

func (x workerApps) Grant(ctx context.Context, g wire.BrowserGrant) error {
	return x.a.Grant(ctx, g.Instance, g.Browser, g.Principal, g.Role)
}

func (x workerApps) RevokeSessions(ctx context.Context, rev wire.Revocation) error {
	return x.a.RevokeSessions(ctx, rev)
}

func (x workerApps) EndSession(ctx context.Context, rev wire.SessionRevocation) error {
	return x.a.EndSession(ctx, rev)
}

func (x workerApps) Browsers(ctx context.Context, iid string) ([]wire.BrowserInfo, error) {
	return x.a.Browsers(ctx, iid)
}

func (x workerApps) RunJob(ctx context.Context, run wire.JobRun) error {
	return x.a.RunJob(ctx, run)
}

func (x workerApps) CancelJob(ctx context.Context, id string, attempt int) error {
	return x.a.CancelJob(ctx, id, attempt)
}

// Ping answers that the worker's RMI side is alive.
func (x workerApps) Ping(ctx context.Context) error { return nil }
