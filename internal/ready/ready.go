// Package ready is the --ready-file: the addresses a process really bound
// (port 0 becomes a real port), written once it serves, so a supervisor or
// a test never has to pick a free port in advance.
package ready

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/cloudbrowser-go/cloudbrowser/internal/atomicfile"
)

// File is the content of a ready file.
type File struct {
	Role  string            `json:"role"`
	Pid   int               `json:"pid"`
	Addrs map[string]string `json:"addrs"`
}

// Write writes this process's ready file atomically. Addresses that are ""
// (a listener not configured) are left out.
func Write(path, role string, addrs map[string]string) error {
	f := File{Role: role, Pid: os.Getpid(), Addrs: map[string]string{}}
	for k, v := range addrs {
		if v != "" {
			f.Addrs[k] = v
		}
	}
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("ready file: %w", err)
	}
	return nil
}

// Read reads a ready file; an error wrapping os.ErrNotExist means the
// process is not ready (yet).
func Read(path string) (File, error) {
	var f File
	b, err := os.ReadFile(path)
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("ready file %s: %w", path, err)
	}
	return f, nil
}
