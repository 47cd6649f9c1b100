package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v3"

	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
	"github.com/cloudbrowser-go/cloudbrowser/internal/secret"
	"github.com/cloudbrowser-go/cloudbrowser/master"
)

// workerKeyCmd writes the key of one worker id, on the master's host: a
// worker that runs under a fixed --id proves that id with it on every
// start (the shared worker.key registers new ids only).
func workerKeyCmd() *cli.Command {
	return &cli.Command{
		Name:      "worker-key",
		Usage:     "write the key of a worker id (run on the master's host; the worker proves its id with it)",
		ArgsUsage: " ",
		Description: `A worker id is proven by that id's own key, derived from the cluster secret. The shared
<data-dir>/worker.key registers an id only the first time the cluster sees it; a worker
restarted under a fixed --id needs its own key. This writes <data-dir>/workers/<id>.key
(mode 0600) and prints its path: copy it to the worker's host and start the worker with
--secret-file pointing at it.`,
		Flags: []cli.Flag{
			dataDirFlag,
			&cli.StringFlag{Name: "id", Required: true, Usage: "worker id: " + ids.WorkerRule},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			id := cmd.String("id")
			if !ids.ValidWorker(id) {
				return fmt.Errorf("--id %q: %s", id, ids.WorkerRule)
			}
			dir := cmd.String("data-dir")
			cluster, err := secret.Load(filepath.Join(dir, "cluster.secret"))
			if errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("--data-dir %s has no cluster.secret: run this on the master's host, with the master's --data-dir", dir)
			}
			if err != nil {
				return fmt.Errorf("cluster secret: %w", err)
			}
			path := master.WorkerKeyPath(dir, id)
			if err := secret.Write(path, secret.WorkerKey(cluster, id)); err != nil {
				return fmt.Errorf("worker %s key: %w", id, err)
			}
			fmt.Fprintln(cmd.Root().Writer, path)
			return nil
		},
	}
}
