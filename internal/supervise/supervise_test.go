//go:build linux

package supervise

import (
	"context"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
)

// startSleeper starts a process the test reaps itself, standing for one a
// previous parent started.
func startSleeper(t *testing.T) ID {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep command:", err)
	}
	go func() { _ = cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	id, err := Identify(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestAdoptWatchesThenReplaces(t *testing.T) {
	old := startSleeper(t)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan ID, 4)
	p := Adopt(ctx, zerolog.Nop(), Spec{Name: "sleeper", Path: "sleep", Args: []string{"60"}, Detach: true,
		OnStart: func(id ID) { started <- id }}, old)
	testutil.Eventually(t, 20*time.Second, testutil.Cond("the adopted pid", func() bool { return p.Pid() == old.Pid }))

	// The adopted process dies: a new one takes its place (no duplicate
	// while it lived, none missing after).
	if err := exec.Command("kill", "-9", strconv.Itoa(old.Pid)).Run(); err != nil {
		t.Fatal(err)
	}
	var next ID
	select {
	case next = <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("no replacement started")
	}
	if next.Pid == old.Pid || !next.Running() || p.Restarts() != 1 {
		t.Fatalf("replacement %+v (old %+v), restarts %d", next, old, p.Restarts())
	}

	cancel()
	<-p.Done()
	if next.Running() {
		t.Fatal("stopping the supervisor left its child running")
	}
}

func TestAdoptStopsOnCancel(t *testing.T) {
	old := startSleeper(t)
	ctx, cancel := context.WithCancel(context.Background())
	p := Adopt(ctx, zerolog.Nop(), Spec{Name: "sleeper", Path: "sleep", Args: []string{"60"}}, old)
	testutil.Eventually(t, 20*time.Second, testutil.Cond("the adopted pid", func() bool { return p.Pid() == old.Pid }))
	cancel()
	<-p.Done()
	if old.Running() {
		t.Fatal("the adopted process survived a clean stop")
	}
}

func TestStopIgnoresReusedPid(t *testing.T) {
	id := startSleeper(t)
	stale := ID{Pid: id.Pid, Start: id.Start + 1} // same pid, another process
	Stop(stale, time.Second, zerolog.Nop())
	if !id.Running() {
		t.Fatal("Stop signalled a process whose start time differs")
	}
	Stop(id, time.Second, zerolog.Nop())
	if id.Running() {
		t.Fatal("Stop left the process running")
	}
}
