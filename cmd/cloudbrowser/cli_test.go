package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v3"
)

// The CLI as a process: TestCLIHelperProcess is this test binary standing
// in for the cloudbrowser binary when a test starts it with cliHelperArgs
// set, so the tests see real exit codes and run each command line in a
// fresh process (urfave/cli keeps state in the package's shared flags).
const (
	cliHelperArgs = "CLOUDBROWSER_TEST_ARGS" // JSON array: the command line after "cloudbrowser"
	cliHelperMode = "CLOUDBROWSER_TEST_MODE" // "run" (main) or "dry" (dryRun)
)

func TestCLIHelperProcess(t *testing.T) {
	raw := os.Getenv(cliHelperArgs)
	if raw == "" {
		return // a test run, not a helper process
	}
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	if os.Getenv(cliHelperMode) == "dry" {
		os.Exit(dryRun(args))
	}
	os.Args = append([]string{"cloudbrowser"}, args...)
	main()
	os.Exit(0)
}

// cliResult is how a helper process ended.
type cliResult struct {
	code           int
	stdout, stderr string
}

// runCLI runs `cloudbrowser args...` in a helper process with env (and
// none of the test's own CB_* variables), in mode.
func runProcess(t *testing.T, mode string, env map[string]string, args ...string) cliResult {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard only
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCLIHelperProcess$", "-test.count=1")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CB_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, cliHelperArgs+"="+string(raw), cliHelperMode+"="+mode)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	res := cliResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("cloudbrowser %s: %v", strings.Join(args, " "), err)
	}
	return res
}

// dryParse is what dryRun reports of a command line: the command it
// selected, its flags' values, and the address rule's verdict.
type dryParse struct {
	Command []string          `json:"command"` // e.g. ["worker"]
	Values  map[string]string `json:"values"`  // every flag of the command and the root
	Set     []string          `json:"set"`     // flags given (command line or environment)
	Address string            `json:"address"` // the one address rule's error, "" = none
	Error   string            `json:"error"`   // the command line did not parse
}

// dryRun parses args with the real command tree, every action replaced by
// one that reports what was parsed (as JSON on stdout) instead of running.
// The address rule is checked without resolving names: the deployment
// files name hosts and containers that do not exist here.
func dryRun(args []string) int {
	a := app()
	a.Writer, a.ErrWriter = os.Stderr, os.Stderr
	var got dryParse
	var walk func(c *cli.Command)
	walk = func(c *cli.Command) {
		for _, sub := range c.Commands {
			walk(sub)
		}
		c.Action = func(ctx context.Context, cmd *cli.Command) error {
			for _, l := range cmd.Lineage() {
				if l != cmd.Root() {
					got.Command = append([]string{l.Name}, got.Command...)
				}
			}
			got.Values = map[string]string{}
			for _, l := range cmd.Lineage() {
				for _, f := range l.Flags {
					name := f.Names()[0]
					if _, ok := got.Values[name]; !ok {
						got.Values[name] = fmt.Sprint(l.Value(name))
						if l.IsSet(name) {
							got.Set = append(got.Set, name)
						}
					}
				}
			}
			if err := staticAddressRule(cmd); err != nil {
				got.Address = err.Error()
			}
			return nil
		}
	}
	walk(a)
	if err := a.Run(context.Background(), append([]string{"cloudbrowser"}, args...)); err != nil {
		got.Error = err.Error()
	}
	_ = json.NewEncoder(os.Stdout).Encode(got)
	return 0
}

// staticAddressRule is the rule of addrrule.go for cmd's role, without
// resolving --gossip-advertise.
func staticAddressRule(cmd *cli.Command) error {
	gossip := func() error {
		return checkAdvertise("gossip", cmd.String("gossip"), "gossip-advertise", cmd.String("gossip-advertise"), hostOnly, "the other cluster members")
	}
	switch cmd.Name {
	case "worker":
		if err := checkAdvertise("listen", cmd.String("listen"), "advertise", cmd.String("advertise"), hostPort, "the proxies"); err != nil {
			return err
		}
		return gossip()
	case "proxy", "master":
		return gossip()
	}
	return nil // up binds loopback only; the rest are clients
}

// TestKeyFileRefused: a worker or proxy given a key file it cannot use
// exits non-zero at once, naming the flag and the file, before it starts
// anything (Chromium, listeners, the master's connection).
func TestKeyFileRefused(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key := strings.Repeat("ab", 32) // the form of a role key
	subdir := filepath.Join(dir, "a-directory")
	if err := os.Mkdir(subdir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, want string
	}{
		{"missing", filepath.Join(dir, "nope.key"), "no such file or directory"},
		{"a directory", subdir, "is a directory"},
		{"readable by others", write("open.key", key+"\n", 0o644), "must not be readable by group or others"},
		{"empty", write("empty.key", "", 0o600), "is empty"},
		{"truncated", write("short.key", key[:9]+"\n", 0o600), "is corrupt"},
		{"two lines", write("lines.key", key[:20]+"\n"+key[20:]+"\n", 0o600), "control character"},
	} {
		for _, role := range []string{"worker", "proxy"} {
			t.Run(tc.name+"/"+role, func(t *testing.T) {
				args := []string{"--log-level", "error", role, "--secret-file", tc.path, "--master", "127.0.0.1:1"}
				if role == "worker" {
					args = append(args, "--runtime", "none")
				}
				res := runProcess(t, "run", nil, args...)
				if res.code == 0 {
					t.Fatalf("exit 0 with key file %s; stderr:\n%s", tc.path, res.stderr)
				}
				for _, want := range []string{"--secret-file " + tc.path, tc.want, role + ".key"} {
					if !strings.Contains(res.stderr, want) {
						t.Errorf("stderr does not name %q:\n%s", want, res.stderr)
					}
				}
			})
		}
	}
	t.Run("unreadable", func(t *testing.T) {
		if os.Geteuid() == 0 {
			// root reads a mode-000 file: "a directory" above stands for
			// a file that cannot be read.
			t.Log("running as root: an unreadable file is covered by the directory case")
			return
		}
		p := write("locked.key", key, 0o000)
		res := runProcess(t, "run", nil, "worker", "--secret-file", p, "--runtime", "none")
		if res.code == 0 || !strings.Contains(res.stderr, "--secret-file "+p) || !strings.Contains(res.stderr, "permission denied") {
			t.Errorf("exit %d, stderr:\n%s", res.code, res.stderr)
		}
	})
}

// TestAddressRuleCLI: a process whose peers dial a listener bound to every
// interface refuses to start without the address to advertise, naming
// the flags; exit status 1.
func TestAddressRuleCLI(t *testing.T) {
	env := map[string]string{"CB_SECRET": strings.Repeat("ab", 32)}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"worker", "--listen", ":8000", "--runtime", "none"}, "--listen :8000 binds every interface, which is no address the proxies can dial: set --advertise"},
		{[]string{"worker", "--listen", "127.0.0.1:0", "--gossip", "[::]:7946", "--runtime", "none"}, "--gossip [::]:7946 binds every interface, which is no address the other cluster members can dial: set --gossip-advertise"},
		{[]string{"proxy", "--gossip", "0.0.0.0:0"}, "--gossip 0.0.0.0:0 binds every interface"},
		{[]string{"master", "--data-dir", t.TempDir(), "--gossip", ":7946"}, "--gossip :7946 binds every interface"},
	} {
		res := runProcess(t, "run", env, tc.args...)
		if res.code != 1 || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("cloudbrowser %s: exit %d, want 1 and %q in:\n%s", strings.Join(tc.args, " "), res.code, tc.want, res.stderr)
		}
	}
}

// TestAddressRule: which command lines the rule lets through, parsed by
// the real command tree (dry run).
func TestAddressRule(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string // "" = accepted
	}{
		// The defaults: the embedded cluster and every role on loopback.
		{args: []string{"up"}},
		{args: []string{"master"}}, // its public --listen :8080 is exempt
		{args: []string{"worker"}},
		{args: []string{"proxy"}},
		// Public and RMI listeners need no advertise flag.
		{args: []string{"master", "--rmi", "0.0.0.0:7070", "--admin", ":9090", "--listen", "[::]:8080"}},
		{args: []string{"proxy", "--listen", "0.0.0.0:8080", "--admin", ":9091"}},
		// A specific bind needs none either.
		{args: []string{"worker", "--listen", "10.0.0.2:8000", "--gossip", "10.0.0.2:7946"}},
		// A wildcard bind with its advertise flag, given or from the environment.
		{args: []string{"worker", "--listen", ":8000", "--advertise", "w1.example:8000", "--gossip", ":7946", "--gossip-advertise", "10.0.0.2"}},
		{args: []string{"worker", "--listen", "0.0.0.0:8000", "--gossip", "0.0.0.0:7946"},
			env: map[string]string{"CB_ADVERTISE": "worker1:8000", "CB_GOSSIP_ADVERTISE": "worker1"}},
		{args: []string{"master", "--gossip", "0.0.0.0:7946", "--gossip-advertise", "master"}},
		// Refused.
		{args: []string{"worker", "--listen", "0.0.0.0:8000"}, want: "--listen 0.0.0.0:8000 binds every interface"},
		{args: []string{"worker", "--listen", "[::]:8000"}, want: "--listen [::]:8000 binds every interface"},
		{args: []string{"worker", "--listen", ":8000", "--advertise", "0.0.0.0:8000"}, want: "--advertise 0.0.0.0:8000: a wildcard address"},
		{args: []string{"worker", "--listen", ":8000", "--advertise", "w1.example"}, want: "--advertise w1.example: want host:port"},
		{args: []string{"worker", "--listen", ":8000", "--advertise", "w1.example:0"}, want: "the port must be a number from 1 to 65535"},
		{args: []string{"worker", "--gossip", ":7946", "--gossip-advertise", "10.0.0.2:7946"}, want: "--gossip-advertise 10.0.0.2:7946: give the host only"},
		{args: []string{"proxy", "--gossip", ":0"}, want: "--gossip :0 binds every interface"},
		{args: []string{"master", "--gossip", "[::]:7946"}, want: "--gossip [::]:7946 binds every interface"},
	} {
		var got dryParse
		res := runProcess(t, "dry", tc.env, tc.args...)
		if err := json.Unmarshal([]byte(res.stdout), &got); err != nil || got.Error != "" {
			t.Fatalf("cloudbrowser %s: %v %s\n%s", strings.Join(tc.args, " "), err, got.Error, res.stderr)
		}
		if (tc.want == "") != (got.Address == "") || !strings.Contains(got.Address, tc.want) {
			t.Errorf("cloudbrowser %s (env %v): address rule says %q, want %q", strings.Join(tc.args, " "), tc.env, got.Address, tc.want)
		}
	}
}

// TestGossipAdvertiseResolved: a name given to --gossip-advertise is
// resolved at start (memberlist takes an IP only); an IP is kept.
func TestGossipAdvertiseResolved(t *testing.T) {
	for _, tc := range []struct{ adv, want string }{
		{"", ""},
		{"10.0.0.2", "10.0.0.2"},
		{"fd00::2", "fd00::2"},
		{"localhost", "127.0.0.1"},
	} {
		cmd := &cli.Command{Flags: []cli.Flag{&cli.StringFlag{Name: "gossip-advertise"}}}
		cmd.Action = func(ctx context.Context, c *cli.Command) error {
			got, err := gossipAdvertise(ctx, c, "0.0.0.0:7946")
			if tc.adv == "" {
				if err == nil || !strings.Contains(err.Error(), "binds every interface") {
					t.Errorf("no advertise: %q, %v; want the rule's error", got, err)
				}
				return nil
			}
			if err != nil || got != tc.want {
				t.Errorf("--gossip-advertise %s: %q, %v; want %q", tc.adv, got, err, tc.want)
			}
			return nil
		}
		args := []string{"x"}
		if tc.adv != "" {
			args = append(args, "--gossip-advertise", tc.adv)
		}
		if err := cmd.Run(context.Background(), args); err != nil {
			t.Fatal(err)
		}
	}
}

// TestChildProxyGossip: the master's proxy processes gossip where the
// other members can reach them: on loopback with a loopback master, else
// on every interface advertising the master's address, which the rule
// accepts.
func TestChildProxyGossip(t *testing.T) {
	for _, tc := range []struct {
		master string
		want   []string
	}{
		{"127.0.0.1:7946", nil},
		{"[::1]:7946", nil},
		{"10.0.0.1:7946", []string{"--gossip", "0.0.0.0:0", "--gossip-advertise", "10.0.0.1"}},
		{"[fd00::1]:7946", []string{"--gossip", "[::]:0", "--gossip-advertise", "fd00::1"}},
		{"", nil},
	} {
		got := childGossipArgs(tc.master)
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("master gossip %q: %q, want %q", tc.master, got, tc.want)
			continue
		}
		res := runProcess(t, "dry", nil, append([]string{"proxy"}, got...)...)
		var p dryParse
		if err := json.Unmarshal([]byte(res.stdout), &p); err != nil || p.Error != "" || p.Address != "" {
			t.Errorf("cloudbrowser proxy %q: %v %+v\n%s", got, err, p, res.stderr)
		}
	}
}
