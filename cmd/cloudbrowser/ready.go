package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/urfave/cli/v3"

	"github.com/cloudbrowser-go/cloudbrowser/internal/atomicfile"
)

// readyFileFlag lets a supervisor or a test start a process on port 0 and
// learn the addresses it really bound, with no window in which another
// program could take a port picked in advance.
var readyFileFlag = &cli.StringFlag{Name: "ready-file", Sources: cli.EnvVars("CB_READY_FILE"),
	Usage: `once serving, write {"role":…,"pid":…,"addrs":{…}} with the bound addresses to this file (atomically)`}

// Ready is the content of the --ready-file.
type Ready struct {
	Role  string            `json:"role"`
	Pid   int               `json:"pid"`
	Addrs map[string]string `json:"addrs"`
}

// writeReady writes the ready file if --ready-file is set. Addresses that
// are "" (a listener not configured) are left out.
func writeReady(cmd *cli.Command, role string, addrs map[string]string) error {
	path := cmd.String("ready-file")
	if path == "" {
		return nil
	}
	r := Ready{Role: role, Pid: os.Getpid(), Addrs: map[string]string{}}
	for k, v := range addrs {
		if v != "" {
			r.Addrs[k] = v
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("--ready-file: %w", err)
	}
	return nil
}
