// Package supervise runs child processes of the cloudbrowser binary (proxy
// processes of the Reverse Proxy Manager, workers of `up`) and restarts the
// ones that die.
package supervise

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
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
	if spec.StopTimeout <= 0 {
		spec.StopTimeout = 10 * time.Second
	}
	p := &Process{spec: spec, log: log.With().Str("child", spec.Name).Logger(), done: make(chan struct{})}
	go p.loop(ctx)
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
)

func (p *Process) loop(ctx context.Context) {
	defer close(p.done)
	backoff := minBackoff
	for ctx.Err() == nil {
		started := time.Now()
		err := p.runOnce(ctx)
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

func (p *Process) runOnce(ctx context.Context) error {
	cmd := exec.Command(p.spec.Path, p.spec.Args...)
	cmd.Env = append(os.Environ(), p.spec.Env...)
	cmd.Stdout, cmd.Stderr = p.spec.Stdout, p.spec.Stderr
	setParentDeath(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	p.mu.Lock()
	p.pid = cmd.Process.Pid
	p.mu.Unlock()
	p.log.Info().Int("pid", cmd.Process.Pid).Msg("child started")
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
	p.mu.Lock()
	p.pid = 0
	p.mu.Unlock()
	if err == nil {
		err = errors.New("exited with status 0")
	}
	return err
}
