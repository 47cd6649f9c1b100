package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDamagedDataDir: a master whose data dir holds an empty or corrupt
// secret, token or accounts file (a crash during first start, with an older
// version) refuses to start, naming the file and how to recover, and leaves
// the file alone.
func TestDamagedDataDir(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, tc := range []struct {
		file, content string
		want          []string
	}{
		{"cluster.secret", "", []string{"is empty", "restore it from a backup", "delete it", "worker.key"}},
		{"admin.token", "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", []string{"is corrupt", "restore it from a backup"}},
		{"metrics.token", "\n", []string{"is empty", "delete it"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, tc.file)
			if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, binary, "master", "--data-dir", dir,
				"--listen", "127.0.0.1:0", "--rmi", "127.0.0.1:0", "--gossip", "127.0.0.1:0", "--admin", "127.0.0.1:0").CombinedOutput()
			if err == nil || ctx.Err() != nil {
				t.Fatalf("master started (or hung) with a damaged %s: %v\n%s", tc.file, err, out)
			}
			for _, w := range append([]string{p}, tc.want...) {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if b, _ := os.ReadFile(p); string(b) != tc.content {
				t.Errorf("%s changed to %q", tc.file, b)
			}
		})
	}
}
