// Package supervise runs child processes of the cloudbrowser binary (proxy
// processes of the Reverse Proxy Manager, workers of `up`) and restarts the
// ones that die.
//
// Children die with their parent (parent-death signal) unless Spec.Detach:
// a detached child (a proxy) outlives a parent that crashed, and the
// parent's next incarnation takes it over with Adopt instead of starting a
// duplicate.
package supervise

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/procfs"
)

// Spec describes one supervised process.
type Spec struct {
	Name   string // for logs, e.g. "proxy-1"
	Path   string // executable
	Args   []string
	Env    []string // added to the parent's environment
	Stdout io.Writer
	Stderr io.Writer
	// StopTimeout is how long a child gets after SIGTERM before SIGKILL
	// (default 10s).
	StopTimeout time.Duration
	// Detach lets the child outlive the parent: no parent-death signal, and
	// its own process group, so a terminal's Ctrl-C reaches only the parent
	// (which then stops it cleanly). Stdout and Stderr should be files (or
	// nil): a pipe would close with the parent.
	Detach bool
	// OnStart, if set, is called with every new child's identity (e.g. to
	// record it for adoption after a crash of the parent).
	OnStart func(ID)
}

// ID names one process for the life of the machine: a pid alone can be
// reused after the process exits.
type ID struct {
	Pid   int    `json:"pid"`
	Start uint64 `json:"start"` // /proc start time, clock ticks after boot
}

// Identify reads the identity of a running process.
func Identify(pid int) (ID, error) {
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return ID{}, err
	}
	if !st.Alive() {
		return ID{}, fmt.Errorf("%w: %d has exited", procfs.ErrNoProcess, pid)
	}
	return ID{Pid: pid, Start: st.Start}, nil
}

// Running reports whether id still names a live process.
func (id ID) Running() bool {
	cur, err := Identify(id.Pid)
	return err == nil && cur.Start == id.Start
}

// Process is a supervised child: restarted with backoff whenever it exits,
// until the context given to Start ends.
type Process struct {
	spec Spec
	log  zerolog.Logger
	done chan struct{}

	mu       sync.Mutex
	pid      int
	restarts int
}

// Start launches spec and keeps it running until ctx ends; then the child
// gets SIGTERM (SIGKILL after StopTimeout) and Done is closed once it exited.
func Start(ctx context.Context, log zerolog.Logger, spec Spec) *Process {
	return start(ctx, log, spec, ID{})
}

// Adopt supervises a live process started by an earlier incarnation of this
// parent, as if Start had started it: when it exits, spec is started in its
// place; when ctx ends it is stopped. The caller checked that adopted is
// the process spec describes (its command line).
func Adopt(ctx context.Context, log zerolog.Logger, spec Spec, adopted ID) *Process {
	return start(ctx, log, spec, adopted)
}

func start(ctx context.Context, log zerolog.Logger, spec Spec, adopted ID) *Process {
	config.OrDefault(&spec.StopTimeout, 10*time.Second)
	p := &Process{spec: spec, log: log.With().Str("child", spec.Name).Logger(), done: make(chan struct{})}
	go p.loop(ctx, adopted)
	return p
}

// Done is closed when the process is stopped for good.
func (p *Process) Done() <-chan struct{} { return p.done }

// Pid is the current child's pid (0 between restarts).
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

// Restarts counts restarts after unexpected exits.
func (p *Process) Restarts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restarts
}

const (
	minBackoff = 200 * time.Millisecond
	maxBackoff = 10 * time.Second
	// a child that ran this long is considered healthy: backoff resets.
	healthyAfter = 30 * time.Second
	// pollEvery is how often an adopted process (not our child: no wait
	// status) is checked.
	pollEvery = 100 * time.Millisecond
)

func (p *Process) loop(ctx context.Context, adopted ID) {
	defer close(p.done)
	backoff := minBackoff
	for ctx.Err() == nil {
		started := time.Now()
		var err error
		if adopted.Pid != 0 {
			err = p.watch(ctx, adopted)
			adopted = ID{}
		} else {
			err = p.runOnce(ctx)
		}
		if ctx.Err() != nil {
			return
		}
		if time.Since(started) > healthyAfter {
			backoff = minBackoff
		}
		p.mu.Lock()
		p.restarts++
		p.mu.Unlock()
		p.log.Warn().Err(err).Dur("backoff", backoff).Msg("child exited; restarting")
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

func (p *Process) setPid(pid int) {
	p.mu.Lock()
	p.pid = pid
	p.mu.Unlock()
}

func (p *Process) runOnce(ctx context.Context) error {
	cmd := exec.Command(p.spec.Path, p.spec.Args...)
	cmd.Env = append(os.Environ(), p.spec.Env...)
	cmd.Stdout, cmd.Stderr = p.spec.Stdout, p.spec.Stderr
	if p.spec.Detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	} else {
		setParentDeath(cmd)
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	pid := cmd.Process.Pid
	p.setPid(pid)
	p.log.Info().Int("pid", pid).Msg("child started")
	if p.spec.OnStart != nil {
		if id, err := Identify(pid); err == nil {
			p.spec.OnStart(id)
		}
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var err error
	select {
	case err = <-exited:
	case <-ctx.Done():
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err = <-exited:
		case <-time.After(p.spec.StopTimeout):
			p.log.Warn().Msg("child ignored SIGTERM; killing")
			_ = cmd.Process.Kill()
			err = <-exited
		}
	}
	p.setPid(0)
	if err == nil {
		err = errors.New("exited with status 0")
	}
	return err
}

// watch follows an adopted process until it exits or ctx ends (then it is
// stopped). It is not our child, so its exit is seen by polling /proc, and
// every signal is sent only after checking the pid still names it.
func (p *Process) watch(ctx context.Context, id ID) error {
	p.setPid(id.Pid)
	defer p.setPid(0)
	p.log.Info().Int("pid", id.Pid).Msg("child adopted")
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if !id.Running() {
				return errors.New("adopted child exited")
			}
		case <-ctx.Done():
			stopAdopted(id, p.spec.StopTimeout, p.log)
			return ctx.Err()
		}
	}
}

// stopAdopted sends SIGTERM, then SIGKILL after timeout, and waits until
// the process is gone.
func stopAdopted(id ID, timeout time.Duration, log zerolog.Logger) {
	signal := func(s syscall.Signal) {
		if id.Running() {
			_ = syscall.Kill(id.Pid, s)
		}
	}
	signal(syscall.SIGTERM)
	deadline := time.Now().Add(timeout)
	for id.Running() {
		if time.Now().After(deadline) {
			log.Warn().Int("pid", id.Pid).Msg("adopted child ignored SIGTERM; killing")
			signal(syscall.SIGKILL)
			deadline = time.Now().Add(timeout)
		}
		time.Sleep(pollEvery)
	}
}

// Stop ends a process this parent does not supervise (e.g. a recorded child
// that is not adopted because its arguments changed): SIGTERM, SIGKILL after
// timeout, and wait until it is gone. Nothing if id is no longer running.
func Stop(id ID, timeout time.Duration, log zerolog.Logger) { stopAdopted(id, timeout, log) }
