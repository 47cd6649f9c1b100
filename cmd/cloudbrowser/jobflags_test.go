package main

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/urfave/cli/v3"
)

// TestJobConfigFlags: the job queue's flags reach the config, and a bad
// value is refused with the flag named.
func TestJobConfigFlags(t *testing.T) {
	run := func(args ...string) (string, error) {
		var got string
		cmd := &cli.Command{Name: "master", Flags: jobFlags(), Action: func(_ context.Context, cmd *cli.Command) error {
			jc, _, err := jobConfig(cmd)
			if err != nil {
				return err
			}
			got = strings.Join([]string{strconv.Itoa(jc.QueueCount), strconv.Itoa(jc.QueueLen), strconv.Itoa(jc.LeftoverMax)}, ",")
			return nil
		}}
		err := cmd.Run(context.Background(), append([]string{"master"}, args...))
		return got, err
	}
	if got, err := run("--job-queue-count", "8", "--job-queue-len", "50"); err != nil || got != "8,50,"+strconv.Itoa(jobDefaults.LeftoverMax) {
		t.Fatalf("queue flags: %q %v", got, err)
	}
	if got, err := run(); err != nil || got != strconv.Itoa(jobDefaults.QueueCount)+","+strconv.Itoa(jobDefaults.QueueLen)+","+strconv.Itoa(jobDefaults.LeftoverMax) {
		t.Fatalf("defaults: %q %v", got, err)
	}
	for _, tc := range []struct{ args []string }{
		{[]string{"--job-queue-count", "0"}},
		{[]string{"--job-queue-len", "0"}},
	} {
		if _, err := run(tc.args...); err == nil || !strings.Contains(err.Error(), tc.args[0]) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.args[0])
		}
	}
}
