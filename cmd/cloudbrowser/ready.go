package main

import (
	"fmt"

	"github.com/urfave/cli/v3"

	"github.com/cloudbrowser-go/cloudbrowser/internal/ready"
)

// readyFileFlag lets a supervisor or a test start a process on port 0 and
// learn the addresses it really bound, with no window in which another
// program could take a port picked in advance.
var readyFileFlag = &cli.StringFlag{Name: "ready-file", Sources: cli.EnvVars("CB_READY_FILE"),
	Usage: `once serving, write {"role":…,"pid":…,"addrs":{…}} with the bound addresses to this file (atomically)`}

// writeReady writes the ready file if --ready-file is set.
func writeReady(cmd *cli.Command, role string, addrs map[string]string) error {
	path := cmd.String("ready-file")
	if path == "" {
		return nil
	}
	if err := ready.Write(path, role, addrs); err != nil {
		return fmt.Errorf("--ready-file: %w", err)
	}
	return nil
}
