// Command cloudbrowser runs every part of a CloudBrowser cluster: master,
// workers, reverse proxies, or all of them on one machine (up).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v3"

	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/logx"
	"github.com/cloudbrowser-go/cloudbrowser/internal/secret"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "cloudbrowser:", err)
		os.Exit(1)
	}
}

// run runs the command line args; a bad configuration value is reported
// by the flag that set it.
func run(ctx context.Context, args []string) error {
	if err := app().Run(ctx, args); err != nil {
		return config.Rename(err, fieldFlags())
	}
	return nil
}

func app() *cli.Command {
	return &cli.Command{
		Name:    "cloudbrowser",
		Usage:   "a cluster of server-side browsers for web applications",
		Version: version,
		Description: `CloudBrowser hosts virtual-browser applications: end users open an app's URL and
use a Chromium that runs on a worker, through a client engine page in their own browser.

Run everything on this machine:   cloudbrowser up
Or run the parts on their own:    cloudbrowser master | worker | proxy
Ask a running cluster:            cloudbrowser status

Every flag can also be set with the environment variable shown in its help.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-format", Value: "json", Usage: "log format: json or console", Sources: cli.EnvVars("CB_LOG_FORMAT")},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "log level: debug, info, warn, error", Sources: cli.EnvVars("CB_LOG_LEVEL")},
			readyFileFlag,
		},
		// Reject bad log flags before any command runs.
		Before: func(ctx context.Context, cmd *cli.Command) (context.Context, error) {
			_, err := logger(cmd)
			return ctx, err
		},
		Commands: []*cli.Command{masterCmd(), workerCmd(), proxyCmd(), upCmd(), statusCmd(), deployCmd(), appsCmd(), authorsCmd(), usersCmd(), shareCmd(),
			renderCmd(), jobsCmd(), monitorCmd(), cacheCmd(), sessionsCmd(), workerKeyCmd()},
	}
}

// logger builds the process logger from the global flags.
func logger(cmd *cli.Command) (zerolog.Logger, error) {
	l, err := logx.New(os.Stderr, cmd.String("log-format"), cmd.String("log-level"))
	if err != nil {
		return l, err
	}
	return l.With().Int("pid", os.Getpid()).Logger(), nil
}

// logArgs passes the log flags on to child processes.
func logArgs(cmd *cli.Command) []string {
	return []string{"--log-format", cmd.String("log-format"), "--log-level", cmd.String("log-level")}
}

func defaultDataDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "cloudbrowser")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "state", "cloudbrowser")
	}
	return ".cloudbrowser"
}

var dataDirFlag = &cli.StringFlag{
	Name: "data-dir", Value: defaultDataDir(), Sources: cli.EnvVars("CB_DATA_DIR"),
	Usage: "directory for the master's state: cluster secret, admin token (created with mode 0600)",
}

var secretFileFlag = &cli.StringFlag{
	Name: "secret-file", Sources: cli.EnvVars("CB_SECRET_FILE"),
	Usage: "file holding the secret (mode 0600): the master creates <data-dir>/cluster.secret by default; workers use <data-dir>/worker.key and proxies <data-dir>/proxy.key, which the master writes (the cluster secret also works). CB_SECRET may hold the secret itself",
}

// clusterSecret reads the secret for a worker or proxy: CB_SECRET, else
// --secret-file.
func clusterSecret(cmd *cli.Command) (string, error) {
	if s := os.Getenv("CB_SECRET"); s != "" {
		if err := secret.Check(s); err != nil {
			return "", fmt.Errorf("CB_SECRET: %w", err)
		}
		return s, nil
	}
	path := cmd.String("secret-file")
	if path == "" {
		return "", errors.New("--secret-file (or CB_SECRET) is required: use the master's <data-dir>/worker.key for a worker, <data-dir>/proxy.key for a proxy")
	}
	s, err := secret.Load(path)
	if err != nil {
		// Refuse at once, naming the flag and the file: a worker or proxy
		// started without its key would only retry the master forever.
		return "", fmt.Errorf("--secret-file %s: %w (copy the master's <data-dir>/%s.key to this host with mode 0600; docs/deploying.md)",
			path, err, cmd.Name)
	}
	return s, nil
}

// memberFlags are the gossip flags of workers and proxies.
func memberFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "gossip", Value: "127.0.0.1:0", Sources: cli.EnvVars("CB_GOSSIP"),
			Usage: "membership bind address (port 0 = any)"},
		gossipAdvertiseFlag(),
	}
}

// gossipAdvertiseFlag is --gossip-advertise of every role (addrrule.go).
func gossipAdvertiseFlag() cli.Flag {
	return &cli.StringFlag{Name: "gossip-advertise", Sources: cli.EnvVars("CB_GOSSIP_ADVERTISE"),
		Usage: "address (an IP, or a name resolved once at start) the other members reach the gossip port on; required when --gossip binds every interface; default: the --gossip address"}
}

// withSecret runs action with the process logger and the cluster secret.
func withSecret(action func(ctx context.Context, cmd *cli.Command, log zerolog.Logger, secret string) error) cli.ActionFunc {
	return func(ctx context.Context, cmd *cli.Command) error {
		log, err := logger(cmd)
		if err != nil {
			return err
		}
		sec, err := clusterSecret(cmd)
		if err != nil {
			return err
		}
		return action(ctx, cmd, log, sec)
	}
}
