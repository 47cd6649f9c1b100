package main

import (
	"context"
	"fmt"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v3"

	"github.com/cloudbrowser-go/cloudbrowser/worker"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

const (
	defaultReportPeriod = time.Second
	defaultDeadAfter    = 10 * time.Second
)

func workerCmd() *cli.Command {
	return &cli.Command{
		Name:  "worker",
		Usage: "run a worker: hosts app instances and their virtual browsers",
		Description: `A worker connects to the master (retrying until it is up), joins the gossip layer,
registers, and serves the app instances the master places on it. Proxies forward
end users' requests to its --listen address.`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "master", Value: "127.0.0.1:7070", Sources: cli.EnvVars("CB_MASTER"),
				Usage: "the master's RMI address"},
			secretFileFlag,
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:0", Sources: cli.EnvVars("CB_LISTEN"),
				Usage: "HTTP address proxies forward to (port 0 = any free port)"},
			&cli.StringFlag{Name: "advertise", Sources: cli.EnvVars("CB_ADVERTISE"),
				Usage: "HTTP address the proxies use (default: the --listen address)"},
			&cli.StringFlag{Name: "id", Sources: cli.EnvVars("CB_WORKER_ID"),
				Usage: `worker id, "w-" + up to 16 lowercase letters or digits (default: random)`},
			&cli.StringFlag{Name: "runtime", Value: "none", Sources: cli.EnvVars("CB_RUNTIME"),
				Usage: `virtual browser runtime: "none" keeps page state without rendering`},
		}, memberFlags()...),
		Action: withSecret(func(ctx context.Context, cmd *cli.Command, log zerolog.Logger, sec string) error {
			rt, err := newRuntime(ctx, cmd)
			if err != nil {
				return err
			}
			w, err := worker.New(worker.Config{
				ID: cmd.String("id"), Secret: sec, Master: cmd.String("master"),
				Listen: cmd.String("listen"), Advertise: cmd.String("advertise"),
				GossipAddr: cmd.String("gossip"), GossipAdvertise: cmd.String("gossip-advertise"),
				Runtime: rt, Logger: log, Version: version,
			})
			if err != nil {
				rt.Close()
				return err
			}
			if err := w.Start(ctx); err != nil {
				w.Close()
				return err
			}
			<-ctx.Done()
			log.Info().Msg("stopping")
			return w.Close()
		}),
	}
}

func newRuntime(ctx context.Context, cmd *cli.Command) (browser.Runtime, error) {
	switch r := cmd.String("runtime"); r {
	case "none":
		return &browser.Null{}, nil
	default:
		return nil, fmt.Errorf("--runtime %q: must be none", r)
	}
}
