// Package addrfile publishes a benchmark process's bound address for the
// scripts that start it.
package addrfile

import (
	"fmt"
	"os"
)

// Write writes addr to path atomically (a polling script never reads half
// a line), or prints it when path is "".
func Write(path, addr string) error {
	if path == "" {
		fmt.Println(addr)
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(addr+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
