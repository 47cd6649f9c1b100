package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v3"

	"github.com/cloudbrowser-go/cloudbrowser/apps"
	"github.com/cloudbrowser-go/cloudbrowser/internal/bundle"
	"github.com/cloudbrowser-go/cloudbrowser/internal/secret"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
	"github.com/cloudbrowser-go/cloudbrowser/master/balance"
	"github.com/cloudbrowser-go/cloudbrowser/master/sessions"
)

// masterDefaults are the master flags' defaults.
var masterDefaults = master.DefaultConfig()

func masterFlags() []cli.Flag {
	d := masterDefaults
	return append([]cli.Flag{
		dataDirFlag,
		&cli.StringFlag{Name: "rmi", Value: d.RMIAddr, Sources: cli.EnvVars("CB_RMI"),
			Usage: "address workers and proxies connect to (use :7070 for a multi-host cluster)"},
		&cli.StringFlag{Name: "gossip", Value: d.GossipAddr, Sources: cli.EnvVars("CB_GOSSIP"),
			Usage: "membership (memberlist) bind address, TCP and UDP"},
		gossipAdvertiseFlag(),
		&cli.StringFlag{Name: "admin", Value: d.AdminAddr, Sources: cli.EnvVars("CB_ADMIN"),
			Usage: `admin listener: /healthz, /readyz, /api/v1/... ("" = none; with --proxies 0 also on --listen)`},
		&cli.StringFlag{Name: "listen", Value: d.PublicAddr, Sources: cli.EnvVars("CB_LISTEN"),
			Usage: `public address of the reverse proxies ("" = start no proxy)`},
		&cli.IntFlag{Name: "proxies", Value: d.Proxies, Sources: cli.EnvVars("CB_PROXIES"),
			Usage: "number of proxy processes sharing --listen (SO_REUSEPORT); 0 embeds one proxy in the master (the port is then not shared)"},
		&cli.StringFlag{Name: "apps", Value: "samples", Sources: cli.EnvVars("CB_APPS"),
			Usage: `applications to deploy at start: "samples" (built in), a directory of bundles, or "" for none`},
		&cli.StringFlag{Name: "balancer", Value: string(d.Balancer), Sources: cli.EnvVars("CB_BALANCER"),
			Usage: "placement strategy: least-load (with projected load) or round-robin"},
		&cli.BoolFlag{Name: "no-projection", Sources: cli.EnvVars("CB_NO_PROJECTION"),
			Usage: "least-load without load projection (the naive variant; for experiments)"},
		&cli.DurationFlag{Name: "report-period", Value: d.ReportPeriod, Sources: cli.EnvVars("CB_REPORT_PERIOD"),
			Usage: "how often workers report their load"},
		&cli.DurationFlag{Name: "dead-after", Value: d.DeadAfter, Sources: cli.EnvVars("CB_DEAD_AFTER"),
			Usage: "remove a worker whose RMI connection dropped if it has not re-registered by then (gossip usually removes it sooner)"},
		publicURLFlag(), trustForwardedProtoFlag(),
		&cli.IntFlag{Name: "login-max-failures", Value: loginDefaults.MaxFailures, Sources: cli.EnvVars("CB_LOGIN_MAX_FAILURES"),
			Usage: "failed logins for one user name within --login-window that lock the name"},
		&cli.IntFlag{Name: "login-max-failures-per-ip", Value: loginDefaults.MaxFailuresPerIP, Sources: cli.EnvVars("CB_LOGIN_MAX_FAILURES_PER_IP"),
			Usage: "failed logins from one client address (IPv6: its /64) within --login-window that lock the address"},
		&cli.DurationFlag{Name: "login-window", Value: loginDefaults.Window, Sources: cli.EnvVars("CB_LOGIN_WINDOW"),
			Usage: "how long failed logins are counted (and remembered after a lockout)"},
		&cli.DurationFlag{Name: "login-lockout", Value: loginDefaults.Lockout, Sources: cli.EnvVars("CB_LOGIN_LOCKOUT"),
			Usage: "first lockout after too many failed logins; it doubles with every further failure"},
		&cli.DurationFlag{Name: "login-max-lockout", Value: loginDefaults.MaxLockout, Sources: cli.EnvVars("CB_LOGIN_MAX_LOCKOUT"),
			Usage: "longest lockout"},
		&cli.IntFlag{Name: "automation-max-sessions", Value: d.AutomationMaxSessions, Sources: cli.EnvVars("CB_AUTOMATION_MAX_SESSIONS"),
			Usage: "automation sessions one principal (token) may have open at once; over it, 429 with Retry-After"},
		&cli.DurationFlag{Name: "automation-queue-wait", Value: sessions.DefaultQueueWait, Sources: cli.EnvVars("CB_AUTOMATION_QUEUE_WAIT"),
			Usage: "how long a session request waits for a browser when none is free (the pools full, no worker yet); then 429 with Retry-After; 0: answer at once"},
		&cli.IntFlag{Name: "automation-queue-max", Value: sessions.DefaultQueueMax, Sources: cli.EnvVars("CB_AUTOMATION_QUEUE_MAX"),
			Usage: "session requests that may wait for a browser at once; beyond, 429 with Retry-After"},
	}, append(append(quotaFlags(), jobFlags()...), tlsFlags()...)...)
}

var quotaDefaults = *masterDefaults.Quotas

// quotaFlag is one --quota-<name> flag (docs/quotas.md); 0 = no limit.
type quotaFlag struct {
	name, usage string
	def         int
	field       func(q *wire.Quotas) *int
}

var quotaFlagList = []quotaFlag{
	{wire.QuotaInstancesPerUser, "app instances one user may have open, cluster-wide", quotaDefaults.InstancesPerUser,
		func(q *wire.Quotas) *int { return &q.InstancesPerUser }},
	{wire.QuotaInstancesPerIP, "app instances created from one client address (IPv6: its /64) open at once, cluster-wide", quotaDefaults.InstancesPerIP,
		func(q *wire.Quotas) *int { return &q.InstancesPerIP }},
	{wire.QuotaBrowsersPerUser, "virtual browsers one user may own on each worker", quotaDefaults.BrowsersPerUser,
		func(q *wire.Quotas) *int { return &q.BrowsersPerUser }},
	{wire.QuotaBrowsersPerIP, "virtual browsers created from one client address on each worker", quotaDefaults.BrowsersPerIP,
		func(q *wire.Quotas) *int { return &q.BrowsersPerIP }},
	{wire.QuotaSocketsPerBrowser, "client-engine WebSockets (windows) connected to one virtual browser", quotaDefaults.SocketsPerBrowser,
		func(q *wire.Quotas) *int { return &q.SocketsPerBrowser }},
	{wire.QuotaSocketsPerIP, "client-engine WebSockets from one client address on each worker", quotaDefaults.SocketsPerIP,
		func(q *wire.Quotas) *int { return &q.SocketsPerIP }},
	{"new-identities-burst", "new anonymous identities one client address may get at once (token bucket size), cluster-wide", quotaDefaults.IdentityBurst,
		func(q *wire.Quotas) *int { return &q.IdentityBurst }},
	{"new-identities-per-minute", "refill rate of that bucket: new anonymous identities per minute per client address (0 = never refilled)", quotaDefaults.IdentitiesPerMinute,
		func(q *wire.Quotas) *int { return &q.IdentitiesPerMinute }},
}

func quotaFlags() []cli.Flag {
	out := make([]cli.Flag, 0, len(quotaFlagList))
	for _, f := range quotaFlagList {
		env := "CB_QUOTA_" + strings.ToUpper(strings.ReplaceAll(f.name, "-", "_"))
		usage := f.usage
		if !strings.HasSuffix(usage, ")") {
			usage += " (0 = no limit)"
		}
		out = append(out, &cli.IntFlag{Name: "quota-" + f.name, Value: f.def, Sources: cli.EnvVars(env), Usage: usage})
	}
	return out
}

// quotas reads the --quota-* flags.
func quotas(cmd *cli.Command) (wire.Quotas, error) {
	var q wire.Quotas
	for _, f := range quotaFlagList {
		*f.field(&q) = int(cmd.Int("quota-" + f.name))
	}
	return q, master.ValidateQuotas(q)
}

var loginDefaults = masterDefaults.Login

// loginLimits reads the --login-* flags; zero is refused here rather than
// silently taken as "default" by the master.
func loginLimits(cmd *cli.Command) (auth.LoginLimits, error) {
	l := auth.LoginLimits{
		MaxFailures: int(cmd.Int("login-max-failures")), MaxFailuresPerIP: int(cmd.Int("login-max-failures-per-ip")),
		Window: cmd.Duration("login-window"), Lockout: cmd.Duration("login-lockout"), MaxLockout: cmd.Duration("login-max-lockout"),
		MaxKeys: loginDefaults.MaxKeys,
	}
	return l, l.Validate()
}

func masterCmd() *cli.Command {
	return &cli.Command{
		Name:  "master",
		Usage: "run the master: applications, workers, placement, routing, reverse proxies",
		Description: `The master keeps the applications and the instance table, places new app instances
on workers, answers the proxies' route lookups and runs the reverse proxies.
On first start it creates <data-dir>/cluster.secret, admin.token, author.token,
jobs.token (may only use the jobs API), automation.token (may only open, read and close
automation sessions: /api/v1/sessions, cloudbrowser sessions) and metrics.token (mode 0600;
workers' /metrics need the last one as a bearer token). Deployed applications are kept in
<data-dir>/apps and survive restarts.`,
		Flags: masterFlags(),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			log, err := logger(cmd)
			if err != nil {
				return err
			}
			m, err := newMaster(ctx, cmd, log, masterOverrides{})
			if err != nil {
				return err
			}
			if err := m.Start(ctx); err != nil {
				m.Close()
				return err
			}
			if err := writeReady(cmd, "master", masterAddrs(m)); err != nil {
				m.Close()
				return err
			}
			<-ctx.Done()
			log.Info().Msg("stopping")
			return m.Close()
		},
	}
}

// masterOverrides lets `up` pin addresses.
type masterOverrides struct {
	rmi, gossip, admin *string
}

// newMaster builds the master of the flags with its public side (front.go).
func newMaster(ctx context.Context, cmd *cli.Command, log zerolog.Logger, o masterOverrides) (*master.Master, error) {
	pick := func(over *string, flag string) string {
		if over != nil {
			return *over
		}
		return cmd.String(flag)
	}
	// The RMI address needs no advertise flag: every process is given it
	// (--master). The gossip address is handed to joining processes.
	gossipAdv, err := gossipAdvertise(ctx, cmd, pick(o.gossip, "gossip"))
	if err != nil {
		return nil, err
	}
	dir := cmd.String("data-dir")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("--data-dir %s: %w", dir, err)
	}
	secretPath := filepath.Join(dir, "cluster.secret")
	sec, err := secret.LoadOrCreate(secretPath)
	if errors.Is(err, secret.ErrDamaged) {
		return nil, fmt.Errorf("cluster secret: %w (a new secret changes worker.key and proxy.key: workers and proxies started on their own then need the new ones)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("cluster secret: %w", err)
	}
	token, err := secret.LoadOrCreate(filepath.Join(dir, "admin.token"))
	if err != nil {
		return nil, fmt.Errorf("admin token: %w", err)
	}
	authorToken, err := secret.LoadOrCreate(filepath.Join(dir, "author.token"))
	if err != nil {
		return nil, fmt.Errorf("author token: %w", err)
	}
	metricsToken, err := secret.LoadOrCreate(filepath.Join(dir, "metrics.token"))
	if err != nil {
		return nil, fmt.Errorf("metrics token: %w", err)
	}
	jobsToken, err := secret.LoadOrCreate(filepath.Join(dir, "jobs.token"))
	if err != nil {
		return nil, fmt.Errorf("jobs token: %w", err)
	}
	automationToken, err := secret.LoadOrCreate(filepath.Join(dir, "automation.token"))
	if err != nil {
		return nil, fmt.Errorf("automation token: %w", err)
	}
	queueWait, queueMax := cmd.Duration("automation-queue-wait"), int(cmd.Int("automation-queue-max"))
	if queueWait < 0 {
		return nil, fmt.Errorf("--automation-queue-wait: must not be negative, got %v", queueWait)
	}
	if queueWait == 0 {
		queueWait = -1 // no waiting (0 means the default to the master)
	}
	if queueMax < 1 {
		return nil, fmt.Errorf("--automation-queue-max: must be at least 1, got %d", queueMax)
	}
	maxSessions := int(cmd.Int("automation-max-sessions"))
	if maxSessions < 1 {
		return nil, fmt.Errorf("--automation-max-sessions: must be at least 1, got %d", maxSessions)
	}
	jobCfg, cacheCfg, err := jobConfig(cmd)
	if err != nil {
		return nil, err
	}
	strategy, err := balance.ParseStrategy(cmd.String("balancer"))
	if err != nil {
		return nil, fmt.Errorf("--balancer: %w", err)
	}
	login, err := loginLimits(cmd)
	if err != nil {
		return nil, err
	}
	q, err := quotas(cmd)
	if err != nil {
		return nil, err
	}
	var appList []wire.App
	switch src := cmd.String("apps"); src {
	case "":
	case "samples":
		bs, err := apps.Samples()
		if err != nil {
			return nil, fmt.Errorf("sample apps: %w", err)
		}
		for _, b := range bs {
			appList = append(appList, b.App())
		}
	default:
		bs, err := bundle.LoadAll(os.DirFS(src), ".")
		if err != nil {
			return nil, fmt.Errorf("--apps %s: %w", src, err)
		}
		for _, b := range bs {
			appList = append(appList, b.App())
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("locating own binary for proxy processes: %w", err)
	}
	ft, err := frontTLSOf(cmd, log)
	if err != nil {
		return nil, err
	}
	m, err := master.New(master.Config{
		Jobs: jobCfg, RenderCache: cacheCfg, JobsToken: jobsToken,
		AutomationToken: automationToken, AutomationMaxSessions: maxSessions,
		AutomationQueueWait: queueWait, AutomationQueueMax: queueMax,
		Secret: sec, AdminToken: token, AuthorToken: authorToken, MetricsToken: metricsToken, SecretFile: secretPath, DataDir: dir,
		RMIAddr: pick(o.rmi, "rmi"), GossipAddr: pick(o.gossip, "gossip"), GossipAdvertise: gossipAdv,
		AdminAddr: pick(o.admin, "admin"), PublicAddr: cmd.String("listen"), Proxies: int(cmd.Int("proxies")),
		ProxyCommand: append(append([]string{exe}, logArgs(cmd)...), "proxy"),
		Balancer:     strategy, NoProjection: cmd.Bool("no-projection"),
		ReportPeriod: cmd.Duration("report-period"), DeadAfter: cmd.Duration("dead-after"), Login: login, Quotas: &q,
		Apps: appList, Logger: log, ChildOutput: os.Stderr,
		PublicURL: cmd.String("public-url"), TrustForwardedProto: cmd.Bool("trust-forwarded-proto"),
		PublicTLS: ft.on(),
	})
	if err != nil {
		return nil, err
	}
	m.SetFront(newFrontTLS(m, ft))
	return m, nil
}

// publicURLFlag and trustForwardedProtoFlag tell the cluster when users
// come over HTTPS (HTTPS ends at a load balancer in front of the proxies).
func publicURLFlag() cli.Flag {
	return &cli.StringFlag{Name: "public-url", Sources: cli.EnvVars("CB_PUBLIC_URL"),
		Usage: "how users reach the cluster, e.g. https://cb.example.com; https makes every cookie Secure and pages send HSTS"}
}

func trustForwardedProtoFlag() cli.Flag {
	return &cli.BoolFlag{Name: "trust-forwarded-proto", Sources: cli.EnvVars("CB_TRUST_FORWARDED_PROTO"),
		Usage: "believe X-Forwarded-Proto from a TLS-terminating load balancer in front of the proxies (only behind one)"}
}

// masterAddrs are the master's bound addresses for the --ready-file.
func masterAddrs(m *master.Master) map[string]string {
	return withFrontAddrs(m, map[string]string{"rmi": m.RMIAddr(), "gossip": m.GossipAddr(), "admin": m.AdminAddr(), "public": m.PublicAddr()})
}
