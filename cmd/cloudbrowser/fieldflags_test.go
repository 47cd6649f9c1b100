package main

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/urfave/cli/v3"

	"github.com/cloudbrowser-go/cloudbrowser/master"
	"github.com/cloudbrowser-go/cloudbrowser/proxy"
	"github.com/cloudbrowser-go/cloudbrowser/worker"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium"
)

// TestFieldFlagsResolve: every mapped field exists in a library Config and
// every flag in a command, so the map cannot rot silently.
func TestFieldFlagsResolve(t *testing.T) {
	flags := map[string]bool{}
	for _, c := range []*cli.Command{masterCmd(), workerCmd(), proxyCmd()} {
		for _, f := range c.Flags {
			for _, n := range f.Names() {
				flags["--"+n] = true
			}
		}
	}
	configs := []reflect.Type{reflect.TypeOf(master.Config{}), reflect.TypeOf(worker.Config{}), reflect.TypeOf(proxy.ProcessConfig{}),
		reflect.TypeOf(chromium.Config{})}
	for field, flag := range fieldFlags() {
		if !flags[flag] {
			t.Errorf("%s maps to %s, which no command has", field, flag)
		}
		found := false
		for _, c := range configs {
			if hasField(c, strings.Split(field, ".")) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s is no field of master.Config, worker.Config, proxy.ProcessConfig or chromium.Config", field)
		}
	}
}

func hasField(t reflect.Type, path []string) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return false
	}
	f, ok := t.FieldByName(path[0])
	if !ok {
		return false
	}
	return len(path) == 1 || hasField(f.Type, path[1:])
}

// TestBadConfigNamesTheFlag: a value the library refuses is reported by
// the flag the user typed, not by the Go field.
func TestBadConfigNamesTheFlag(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"proxies", []string{"master", "--data-dir", data, "--proxies", "-1"}, "--proxies must be >= 0, got -1"},
		{"login window", []string{"master", "--data-dir", data, "--login-window", "-1s"}, "--login-window must be positive"},
		{"quota", []string{"master", "--data-dir", data, "--quota-browsers-per-user", "-2"}, "--quota-browsers-per-user must be 0 (no limit) or more, got -2"},
		{"public url", []string{"master", "--data-dir", data, "--public-url", "ftp://x"}, "--public-url "},
		{"automation sessions", []string{"master", "--data-dir", data, "--automation-max-sessions", "0"}, "--automation-max-sessions: must be at least 1, got 0"},
		{"general pool", []string{"worker", "--secret-file", "", "--general-pool-min", "99", "--runtime", "none"}, "--general-pool-min must be -1 (sized from memory) or between 0 and the browser limit (64), got 99"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CB_SECRET", "0123456789abcdef0123456789abcdef")
			err := run(context.Background(), append([]string{"cloudbrowser", "--log-level", "error"}, tc.args...))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("error %v, want one starting %q", err, tc.want)
			}
		})
	}
}
