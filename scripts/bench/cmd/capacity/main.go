// Command capacity finds how many typing users one worker serves before
// their input latency suffers. It connects N clients (N stepped up), each a
// new user on their own virtual browser of the typing test app, through the
// proxy, speaking the client engine's protocol (every frame acknowledged as
// the engine does once drawn; the worker paces frames on the acks), each
// typing at a fixed rate. At each N it records over a fixed window:
// input→frame latency p50/p95 (a key to the first frame that shows it,
// engineclient.Frame.Shows, as inputlatency and slowviewer decide it),
// frames/s per client (with the share that were tile updates) and bytes/s
// per client, the CPU time of the worker's process tree (the Go
// worker and its Chromium children, from /proc/<pid>/stat), its PSS
// (/proc/<pid>/smaps_rollup) and, for context, the CPU of the master with
// its embedded proxy, of this load generator and of everything else. It
// stops once p95 crosses -knee (plus -after-knee more steps) and prints a
// markdown table and the knee. With -perf-dir it then profiles the worker
// tree at that load with perf (the worker serves no pprof endpoint). With
// -workers N, all N workers under up are measured and their columns added
// up (a run across several workers on one machine). With -tiles every
// client asks for tile updates ({"t":"caps","tiles":true}) as the engine
// does, and takes them as it does (engineclient.Session): an update counts
// as a frame, and a key's frame is decided by the same header rule; without
// it, clients get whole frames, as engines did before tiles.
//
//	capacity -public http://127.0.0.1:8080 -up-pid 1234 -steps 1,2,4,6,8,12,16 [-tiles]
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"maps"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/procfs"
	"github.com/cloudbrowser-go/cloudbrowser/scripts/bench/internal/engineclient"
)

type config struct {
	public, app       string
	upPid             int
	steps             []int
	rate              float64
	settle, window    time.Duration
	grace             time.Duration
	knee              time.Duration
	afterKnee         int
	width, height     int
	perfDir           string
	perfTime          time.Duration
	connectTimeout    time.Duration
	pssEvery          time.Duration
	connectConcurrent int
	viewers           int // clients per browser, each typing
	workers           int // worker processes under up, all measured
	tiles             bool
}

func main() {
	var c config
	var steps string
	flag.StringVar(&c.public, "public", "http://127.0.0.1:8080", "public (proxy) URL")
	flag.StringVar(&c.app, "app", "typing", "app mount point: one instance per user, an input at 20..320 x 40..80")
	flag.IntVar(&c.upPid, "up-pid", 0, "pid of cloudbrowser up (its child processes running the worker command are the workers measured)")
	flag.IntVar(&c.workers, "workers", 1, "worker processes under up: all of them are measured (CPU and PSS columns add them up)")
	flag.StringVar(&steps, "steps", "1,2,4,6,8,12,16,24,32,48", "client counts, ascending")
	flag.Float64Var(&c.rate, "rate", 5, "keys per second per client")
	flag.DurationVar(&c.settle, "settle", 3*time.Second, "typing before each measured window (after the step's new clients see their first frame)")
	flag.DurationVar(&c.window, "window", 20*time.Second, "measured window per step")
	flag.DurationVar(&c.grace, "grace", 2*time.Second, "wait after the window for the frames of its last keys; a key with no frame by then counts as late by at least the time it waited")
	flag.DurationVar(&c.knee, "knee", 100*time.Millisecond, "the p95 latency that marks the knee")
	flag.IntVar(&c.afterKnee, "after-knee", 0, "steps to run past the knee")
	flag.IntVar(&c.width, "width", 1280, "each client's window width")
	flag.IntVar(&c.height, "height", 720, "each client's window height")
	flag.StringVar(&c.perfDir, "perf-dir", "", "after the last step, profile the worker tree with perf at that load and write perf.data and reports here")
	flag.DurationVar(&c.perfTime, "perf-time", 10*time.Second, "length of the perf profile")
	flag.DurationVar(&c.connectTimeout, "connect-timeout", 90*time.Second, "a new client's wait for its browser and first frame")
	flag.DurationVar(&c.pssEvery, "pss-every", 2*time.Second, "PSS sampling period within a window (the step reports the largest)")
	flag.IntVar(&c.connectConcurrent, "connect-concurrency", 2, "new clients connected at once")
	flag.BoolVar(&c.tiles, "tiles", false, `every client asks for tile updates ({"t":"caps","tiles":true}; the worker sends them with --frame-tiles, its default); without it, whole frames`)
	flag.IntVar(&c.viewers, "viewers", 1, "clients per virtual browser (co-browsing: the same user's Browser URL opened that many times), each typing; steps count browsers")
	flag.Parse()
	log.SetFlags(log.Ltime)
	log.SetPrefix("capacity: ")
	var err error
	if c.steps, err = parseSteps(steps); err != nil {
		log.Fatal(err)
	}
	if c.upPid <= 0 || c.rate <= 0 || c.window <= 0 || c.connectConcurrent < 1 || c.viewers < 1 || c.workers < 1 {
		log.Fatal("-up-pid, -rate, -window, -connect-concurrency, -viewers and -workers must be positive")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		log.Fatal(err)
	}
}

func parseSteps(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-steps: bad count %q", f)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("-steps must ascend: %d after %d", n, out[len(out)-1])
		}
		out = append(out, n)
	}
	return out, nil
}

// row is one step's result.
type row struct {
	n, keys, noFrame int
	p50, p95         time.Duration
	fps              float64 // frames/s per client, mean
	fpsMin           float64
	updatePct        float64 // of the frames, the tile updates, in %
	kibps            float64 // KiB/s per client, mean
	unapplied        int     // tile updates dropped so far: not on the frame shown
	load             string  // the machine's load averages at the window's end
	cpu              cpuUse
	pssMiB           float64
	pssGoMiB         float64
}

func run(ctx context.Context, c config) error {
	pu, err := url.Parse(c.public)
	if err != nil {
		return fmt.Errorf("-public: %w", err)
	}
	procs, err := findProcs(ctx, c.upPid, c.workers)
	if err != nil {
		return err
	}
	log.Printf("worker pids %v (under up pid %d); %d cores", procs.workerPids(), procs.up, runtime.NumCPU())

	// Every client types until the run ends; typeCtx stops them.
	typeCtx, stopTyping := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var clients []*client
	defer func() {
		stopTyping()
		wg.Wait()
		for _, cl := range clients {
			cl.s.Close()
		}
	}()
	failed := make(chan error, 1)
	every := time.Duration(float64(time.Second) / c.rate)
	paths := map[string]bool{}

	var rows []row
	knee := -1
	var stepErr error
	for _, n := range c.steps {
		added, err := connect(ctx, c, pu.Host, n-len(paths), paths)
		clients = append(clients, added...)
		for _, cl := range added {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := cl.typeKeys(typeCtx, every, rand.N(every)); err != nil && typeCtx.Err() == nil {
					select {
					case failed <- err:
					default:
					}
				}
			}()
		}
		if err != nil {
			stepErr = fmt.Errorf("connecting browser %d of %d: %w", len(paths)+1, n, err)
			break
		}
		r, err := measure(ctx, c, procs, clients, failed)
		if err != nil {
			stepErr = fmt.Errorf("step with %d clients: %w", n, err)
			break
		}
		rows = append(rows, r)
		log.Printf("N=%d keys=%d p50=%.1fms p95=%.1fms fps/client=%.2f (min %.2f) updates=%.0f%% KiB/s/client=%.1f cpu go=%.0f%% chromium=%.0f%% master+proxy=%.0f%% loadgen=%.0f%% others=%.0f%% machine=%.0f%%/%d pss=%.0fMiB no_frame=%d unapplied=%d load=%s",
			r.n, r.keys, engineclient.Ms(r.p50), engineclient.Ms(r.p95), r.fps, r.fpsMin, r.updatePct, r.kibps, r.cpu.goPct, r.cpu.chromiumPct,
			r.cpu.upPct, r.cpu.selfPct, r.cpu.otherPct, r.cpu.machinePct, 100*runtime.NumCPU(), r.pssMiB, r.noFrame, r.unapplied, r.load)
		if knee < 0 && r.p95 >= c.knee {
			knee = len(rows) - 1
		}
		if knee >= 0 && len(rows)-1-knee >= c.afterKnee {
			break
		}
	}
	printTable(c, rows, knee)
	if stepErr != nil {
		fmt.Printf("\nstopped: %v\n", stepErr)
	}
	if c.perfDir != "" && len(rows) > 0 && stepErr == nil {
		fmt.Printf("\n## perf profile of the worker trees at N=%d (%v)\n", len(clients), c.perfTime)
		if err := profile(ctx, c, procs); err != nil {
			return fmt.Errorf("perf: %w", err)
		}
	}
	return stepErr
}

// client is one user: their socket and the times their keys were sent.
type client struct {
	s    *engineclient.Session
	mu   sync.Mutex
	sent []time.Time
	// ended: the socket's end was reported (a client the worker dropped
	// shows no frames from then on, which is not the worker being slow).
	ended bool
}

// connect adds k browsers, at most c.connectConcurrent at a time, each a
// new user's, with c.viewers clients each, and waits for each client's
// first frame.
func connect(ctx context.Context, c config, host string, k int, paths map[string]bool) ([]*client, error) {
	var (
		mu    sync.Mutex
		out   []*client
		first error
		wg    sync.WaitGroup
	)
	sem := make(chan struct{}, c.connectConcurrent)
	for range k {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			cls, path, err := connectOne(ctx, c, host)
			mu.Lock()
			defer mu.Unlock()
			if err == nil && paths[path] {
				for _, cl := range cls {
					cl.s.Close()
				}
				err = fmt.Errorf("two users got the same browser %s", path)
			}
			if err != nil {
				if first == nil {
					first = err
				}
				return
			}
			paths[path] = true
			out = append(out, cls...)
		}()
	}
	wg.Wait()
	return out, first
}

// connectOne opens the app as a new user and connects c.viewers clients to
// their browser; the first focuses the input.
func connectOne(ctx context.Context, c config, host string) ([]*client, string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.connectTimeout)
	defer cancel()
	path, cookies, err := engineclient.Open(ctx, c.public, c.app)
	if err != nil {
		return nil, "", err
	}
	var out []*client
	fail := func(err error) ([]*client, string, error) {
		for _, cl := range out {
			cl.s.Close()
		}
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	for i := range c.viewers {
		s, err := engineclient.Connect(ctx, host, path, cookies, nil, true)
		if err != nil {
			return fail(err)
		}
		out = append(out, &client{s: s})
		if c.tiles {
			if err := s.AskTiles(); err != nil {
				return fail(err)
			}
		}
		if i == 0 {
			err = s.Focus(ctx, c.width, c.height)
		} else {
			_, err = s.WaitShown(ctx, time.Time{})
		}
		if err != nil {
			return fail(err)
		}
	}
	return out, path, nil
}

// typeKeys types a key every interval, the first after phase (clients are
// spread over the interval, as real users are), until ctx ends.
func (cl *client) typeKeys(ctx context.Context, every, phase time.Duration) error {
	select {
	case <-time.After(phase):
	case <-ctx.Done():
		return nil
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := 0; ; i++ {
		t := time.Now()
		cl.mu.Lock()
		cl.sent = append(cl.sent, t)
		cl.mu.Unlock()
		if err := cl.s.Type(engineclient.TypingKey(i)); err != nil {
			return fmt.Errorf("typing: %w (socket: %v)", err, cl.s.Err())
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil
		case <-cl.s.Done():
			return fmt.Errorf("socket closed: %w", cl.s.Err())
		}
	}
}

// keysIn returns the keys sent in [from, to).
func (cl *client) keysIn(from, to time.Time) []time.Time {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	var out []time.Time
	for _, t := range cl.sent {
		if !t.Before(from) && t.Before(to) {
			out = append(out, t)
		}
	}
	return out
}

// measure lets the clients type for c.settle, then measures one window.
func measure(ctx context.Context, c config, procs procSet, clients []*client, failed <-chan error) (row, error) {
	wait := func(d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case err := <-failed:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := wait(c.settle); err != nil {
		return row{}, err
	}
	r := row{n: len(clients)}
	t0 := time.Now()
	cpu0, err := sampleCPU(procs)
	if err != nil {
		return row{}, err
	}
	end := t0.Add(c.window)
	for {
		pss, goPss, err := treePSS(procs.workerPids())
		if err != nil {
			return row{}, err
		}
		r.pssMiB, r.pssGoMiB = max(r.pssMiB, mib(pss)), max(r.pssGoMiB, mib(goPss))
		left := time.Until(end)
		if left <= 0 {
			break
		}
		if err := wait(min(left, c.pssEvery)); err != nil {
			return row{}, err
		}
	}
	t1 := time.Now()
	cpu1, err := sampleCPU(procs)
	if err != nil {
		return row{}, err
	}
	r.cpu = cpu1.since(cpu0)
	r.load = loadAvg()
	if err := wait(c.grace); err != nil {
		return row{}, err
	}
	var lat []time.Duration
	secs := t1.Sub(t0).Seconds()
	r.fpsMin = -1
	frameCount, updates := 0, 0
	for i, cl := range clients {
		if err := cl.s.Err(); err != nil && !cl.ended {
			cl.ended = true
			log.Printf("client %d: its socket ended: %v", i+1, err)
		}
		keys := cl.keysIn(t0, t1)
		frames := cl.s.Frames(t0)
		l, missing := engineclient.Latencies(keys, frames)
		lat = append(lat, l...)
		for _, k := range keys[len(keys)-missing:] { // the keys no frame showed are the last ones
			lat = append(lat, time.Since(k)) // late by at least this
		}
		r.keys += len(keys)
		r.noFrame += missing
		inWindow, bytes := 0, 0
		for _, f := range frames {
			if f.At.Before(t1) {
				inWindow++
				bytes += f.Bytes
				if f.Update {
					updates++
				}
			}
		}
		frameCount += inWindow
		r.unapplied += cl.s.Unapplied()
		fps := float64(inWindow) / secs
		r.fps += fps / float64(len(clients))
		r.kibps += float64(bytes) / 1024 / secs / float64(len(clients))
		if r.fpsMin < 0 || fps < r.fpsMin {
			r.fpsMin = fps
		}
	}
	if frameCount > 0 {
		r.updatePct = 100 * float64(updates) / float64(frameCount)
	}
	if len(lat) == 0 {
		return row{}, errors.New("no keys typed in the window")
	}
	slices.Sort(lat)
	r.p50, r.p95 = engineclient.Percentile(lat, .5), engineclient.Percentile(lat, .95)
	return r, nil
}

func printTable(c config, rows []row, knee int) {
	who := "each on its own virtual browser"
	if c.viewers > 1 {
		who = fmt.Sprintf("%d on each virtual browser (N counts clients, STEPS browsers)", c.viewers)
	}
	frames := "whole frames (no caps message)"
	if c.tiles {
		frames = "tile updates asked for (caps tiles)"
	}
	fmt.Printf("\n## Capacity: clients typing %g keys/s each, %s (%dx%d), %s, %v per step\n\n",
		c.rate, who, c.width, c.height, frames, c.window)
	fmt.Printf("CPU%% is of one core (the machine has %d): the workers' Go processes, their Chromium processes, the master with its embedded proxy, this load generator and every other process on the machine. PSS: the workers' trees (of which the Go processes), largest sample in the step.\n\n", runtime.NumCPU())
	fmt.Println("Updates: the share of the frames that were tile updates; KiB/s: what a client received; load: the machine's load averages (1, 5, 15 min) at the window's end.")
	fmt.Println()
	fmt.Println("| N | keys | p50 ms | p95 ms | fps/client (min) | updates % | KiB/s/client | CPU% Go | CPU% Chromium | PSS MiB (Go) | CPU% master+proxy | CPU% load gen | CPU% others | no frame | load |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	unapplied := 0
	for _, r := range rows {
		fmt.Printf("| %d | %d | %.1f | %.1f | %.2f (%.2f) | %.0f | %.1f | %.0f | %.0f | %.0f (%.0f) | %.0f | %.0f | %.0f | %d | %s |\n",
			r.n, r.keys, engineclient.Ms(r.p50), engineclient.Ms(r.p95), r.fps, r.fpsMin, r.updatePct, r.kibps, r.cpu.goPct, r.cpu.chromiumPct,
			r.pssMiB, r.pssGoMiB, r.cpu.upPct, r.cpu.selfPct, r.cpu.otherPct, r.noFrame, r.load)
		unapplied = max(unapplied, r.unapplied)
	}
	if unapplied > 0 {
		fmt.Printf("\n%d tile updates in the run came on a frame other than the one a client showed and were dropped (a refresh asked for each)\n", unapplied)
	}
	fmt.Println()
	switch {
	case knee == 0:
		fmt.Printf("knee: p95 is %.1f ms at N=%d already, over %v\n", engineclient.Ms(rows[0].p95), rows[0].n, c.knee)
	case knee > 0:
		a, b := rows[knee-1], rows[knee]
		fmt.Printf("knee: p95 crosses %v between N=%d (%.1f ms) and N=%d (%.1f ms)\n",
			c.knee, a.n, engineclient.Ms(a.p95), b.n, engineclient.Ms(b.p95))
	case len(rows) > 0:
		fmt.Printf("knee: not reached; p95 %.1f ms at N=%d, the last step\n", engineclient.Ms(rows[len(rows)-1].p95), rows[len(rows)-1].n)
	}
}

// procSet is the processes measured: `cloudbrowser up` (the master with
// its embedded proxy) and its workers, whose descendants are Chromium.
type procSet struct {
	up, self int
	workers  []proc
}

// proc is a process as its pid and start time (pids are reused).
type proc struct {
	pid   int
	start uint64
}

func (p procSet) workerPids() []int {
	pids := make([]int, len(p.workers))
	for i, w := range p.workers {
		pids[i] = w.pid
	}
	return pids
}

// findProcs finds up's n children that run `worker`; up starts them all
// at once, so they appear within moments of each other.
func findProcs(ctx context.Context, up, n int) (procSet, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ps, err := workersOf(up)
		if err != nil || len(ps.workers) >= n {
			return ps, err
		}
		if time.Now().After(deadline) {
			return procSet{}, fmt.Errorf("%d worker processes under up pid %d, want %d", len(ps.workers), up, n)
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return procSet{}, ctx.Err()
		}
	}
}

func workersOf(up int) (procSet, error) {
	all, err := procfs.ReadAll()
	if err != nil {
		return procSet{}, err
	}
	if _, ok := all[up]; !ok {
		return procSet{}, fmt.Errorf("-up-pid %d: no such process", up)
	}
	ps := procSet{up: up, self: os.Getpid()}
	for pid, st := range all {
		if st.PPid != up || !st.Alive() {
			continue
		}
		if args, err := procfs.Cmdline(pid); err == nil && slices.Contains(args, "worker") {
			ps.workers = append(ps.workers, proc{pid, st.Start})
		}
	}
	slices.SortFunc(ps.workers, func(a, b proc) int { return a.pid - b.pid })
	return ps, nil
}

// cpuSample is the CPU time, in ticks, of each group at one moment.
type cpuSample struct {
	at                 time.Time
	goTicks            uint64
	chromium           map[[2]uint64]uint64 // (pid, start) → ticks: processes come and go
	up, self           uint64
	machineBusy, total uint64
}

// cpuUse is CPU in percent of one core over an interval.
type cpuUse struct {
	goPct, chromiumPct, upPct, selfPct float64
	otherPct                           float64 // the rest of the machine
	machinePct                         float64 // all of it
}

func sampleCPU(p procSet) (cpuSample, error) {
	all, err := procfs.ReadAll()
	if err != nil {
		return cpuSample{}, err
	}
	s := cpuSample{at: time.Now(), chromium: map[[2]uint64]uint64{}}
	for _, wp := range p.workers {
		w, ok := all[wp.pid]
		if !ok || !w.Alive() || w.Start != wp.start {
			return cpuSample{}, fmt.Errorf("the worker (pid %d) is gone", wp.pid)
		}
		s.goTicks += w.UTime + w.STime
		for _, pid := range procfs.Tree(all, wp.pid)[1:] {
			st := all[pid]
			s.chromium[[2]uint64{uint64(pid), st.Start}] = st.UTime + st.STime
		}
	}
	s.up = all[p.up].UTime + all[p.up].STime
	if me, ok := all[p.self]; ok {
		s.self = me.UTime + me.STime
	}
	s.machineBusy, s.total, err = machineTicks(filepath.Join(procfs.Dir, "stat"))
	return s, err
}

// since is the CPU used from s0 to s. A Chromium process that ended in
// between is not counted (its last ticks are gone with it); one that
// started counts from zero.
func (s cpuSample) since(s0 cpuSample) cpuUse {
	perPct := s.at.Sub(s0.at).Seconds() * procfs.TicksPerSecond / 100 // ticks that make 1% of a core
	var chromium uint64
	for k, t := range s.chromium {
		chromium += t - min(t, s0.chromium[k])
	}
	u := cpuUse{
		goPct:       float64(s.goTicks-s0.goTicks) / perPct,
		chromiumPct: float64(chromium) / perPct,
		upPct:       float64(s.up-s0.up) / perPct,
		selfPct:     float64(s.self-s0.self) / perPct,
	}
	if dt := s.total - s0.total; dt > 0 {
		u.machinePct = 100 * float64(s.machineBusy-s0.machineBusy) / float64(dt) * float64(runtime.NumCPU())
		u.otherPct = max(0, u.machinePct-u.goPct-u.chromiumPct-u.upPct-u.selfPct)
	}
	return u
}

// machineTicks reads the first line of /proc/stat: busy (all but idle and
// iowait) and total ticks over all cores.
func machineTicks(path string) (busy, total uint64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, fmt.Errorf("machine CPU: %w", err)
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadBytes('\n')
	if err != nil {
		return 0, 0, fmt.Errorf("machine CPU: %w", err)
	}
	fields := bytes.Fields(line)
	if len(fields) < 6 || string(fields[0]) != "cpu" {
		return 0, 0, fmt.Errorf("machine CPU: unexpected %q", line)
	}
	for i, f := range fields[1:] {
		if i >= 8 { // guest time is already in user
			break
		}
		v, err := strconv.ParseUint(string(f), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("machine CPU: %w", err)
		}
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total, nil
}

// treePSS is the PSS of the workers' trees and of the Go workers alone.
func treePSS(workers []int) (total, goPss uint64, err error) {
	all, err := procfs.ReadAll()
	if err != nil {
		return 0, 0, err
	}
	for _, pid := range trees(all, workers) {
		v, err := procfs.PSS(pid)
		if errors.Is(err, procfs.ErrNoProcess) {
			continue // ended meanwhile
		}
		if err != nil {
			return 0, 0, err
		}
		total += v
		if slices.Contains(workers, pid) {
			goPss += v
		}
	}
	return total, goPss, nil
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// loadAvg is the machine's 1, 5 and 15 minute load averages, as
// /proc/loadavg says them.
func loadAvg() string {
	b, err := os.ReadFile(filepath.Join(procfs.Dir, "loadavg"))
	f := strings.Fields(string(b))
	if err != nil || len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// profile records the worker's tree with perf for c.perfTime while the
// clients keep typing, then prints where the samples fall: by process
// (the Go worker, Chromium's browser, GPU and renderer processes), by
// thread name (Chromium names its threads) and by shared object (libjpeg is
// the screencast's JPEG encoder), and the Go worker's hottest functions.
func profile(ctx context.Context, c config, p procSet) error {
	if _, err := exec.LookPath("perf"); err != nil {
		return fmt.Errorf("perf is not installed: %w", err)
	}
	if err := os.MkdirAll(c.perfDir, 0o755); err != nil {
		return err
	}
	all, err := procfs.ReadAll()
	if err != nil {
		return err
	}
	kinds := map[int]string{} // thread id → its process's kind
	var pids []string
	workers := p.workerPids()
	for _, pid := range trees(all, workers) {
		pids = append(pids, strconv.Itoa(pid))
		kind := processKind(pid, slices.Contains(workers, pid))
		tasks, _ := os.ReadDir(filepath.Join(procfs.Dir, strconv.Itoa(pid), "task"))
		for _, t := range tasks {
			if tid, err := strconv.Atoi(t.Name()); err == nil {
				kinds[tid] = kind
			}
		}
	}
	data := filepath.Join(c.perfDir, "perf.data")
	rec := exec.CommandContext(ctx, "perf", "record", "-F", "499", "-g", "-o", data, "-p", strings.Join(pids, ","),
		"--", "sleep", strconv.FormatFloat(c.perfTime.Seconds(), 'f', -1, 64))
	if out, err := rec.CombinedOutput(); err != nil {
		return fmt.Errorf("perf record: %w: %s", err, out)
	}
	report := func(name string, args ...string) (string, error) {
		args = append([]string{"report", "-i", data, "--stdio", "--no-children", "-g", "none"}, args...)
		out, err := exec.CommandContext(ctx, "perf", args...).Output()
		if err != nil {
			return "", fmt.Errorf("perf %v: %w", args, err)
		}
		return string(out), os.WriteFile(filepath.Join(c.perfDir, name), out, 0o644)
	}
	byThread, err := report("by-thread-dso.txt", "--sort", "pid,dso", "--percent-limit", "0")
	if err != nil {
		return err
	}
	shares, err := parseThreadShares(byThread, kinds)
	if err != nil {
		return err
	}
	fmt.Printf("\n%s samples at 499 Hz per thread. Shares of all samples:\n", shares.samples)
	printShares("process", shares.byKind, 0)
	printShares("process / thread name", shares.byThread, 1)
	printShares("process / shared object", shares.byDso, 1)
	var goPids []string
	for _, w := range workers {
		goPids = append(goPids, strconv.Itoa(w))
	}
	goSyms, err := report("go-symbols.txt", "--pid", strings.Join(goPids, ","), "--percentage", "relative", "--sort", "dso,sym", "--percent-limit", "1.5")
	if err != nil {
		return err
	}
	goTotal, err := report("go-inclusive.txt", "--pid", strings.Join(goPids, ","), "--percentage", "relative", "--children", "--sort", "sym", "--percent-limit", "5")
	if err != nil {
		return err
	}
	for _, r := range []struct {
		title, out string
		keep       func(string) bool
	}{
		{"the Go worker's functions, self time, % of the Go worker's samples (≥ 1.5%)", goSyms,
			func(string) bool { return true }},
		{"the Go worker's own and libraries' functions with their callees, % of the Go worker's samples (≥ 5%)", goTotal,
			func(l string) bool { return strings.Contains(l, "github.com/") }},
	} {
		fmt.Printf("\n%s:\n\n```\n", r.title)
		for line := range strings.Lines(r.out) {
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") && r.keep(line) {
				fmt.Print(strings.ReplaceAll(line, "github.com/cloudbrowser-go/cloudbrowser/", ""))
			}
		}
		fmt.Println("```")
	}
	fmt.Printf("\n(perf.data and the reports in %s)\n", c.perfDir)
	return nil
}

// trees is each worker's process tree, the worker first.
func trees(all map[int]procfs.Stat, workers []int) []int {
	var out []int
	for _, w := range workers {
		out = append(out, procfs.Tree(all, w)...)
	}
	return out
}

// processKind names what a process of the worker's tree is.
func processKind(pid int, worker bool) string {
	if worker {
		return "Go worker"
	}
	args, _ := procfs.Cmdline(pid)
	// Chromium's children rewrite their argv into one string.
	for _, a := range strings.Fields(strings.Join(args, " ")) {
		if t, ok := strings.CutPrefix(a, "--type="); ok {
			if t == "gpu-process" {
				return "Chromium GPU process"
			}
			return "Chromium " + t
		}
	}
	return "Chromium browser process"
}

// threadShares are perf's sample shares added up by process kind, by kind
// and thread name, and by kind and shared object.
type threadShares struct {
	samples                 string // as perf says it: "5K"
	byKind, byThread, byDso map[string]float64
}

var reportLine = regexp.MustCompile(`^\s*([0-9.]+)%\s+(\d+):(.*?)\s{2,}(\S.*?)\s*$`)

// parseThreadShares reads `perf report --sort pid,dso` (pid is the thread
// id there).
func parseThreadShares(out string, kinds map[int]string) (threadShares, error) {
	s := threadShares{byKind: map[string]float64{}, byThread: map[string]float64{}, byDso: map[string]float64{}}
	for line := range strings.Lines(out) {
		if n, ok := strings.CutPrefix(strings.TrimSpace(line), "# Samples: "); ok && s.samples == "" {
			s.samples = strings.Fields(n + " ?")[0]
		}
		m := reportLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		pct, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			return s, fmt.Errorf("perf report line %q: %w", line, err)
		}
		tid, _ := strconv.Atoi(m[2])
		kind := kinds[tid]
		if kind == "" {
			kind = "thread started during the profile"
		}
		s.byKind[kind] += pct
		s.byThread[kind+" / "+strings.TrimSpace(m[3])] += pct
		s.byDso[kind+" / "+m[4]] += pct
	}
	if len(s.byKind) == 0 {
		return s, errors.New("perf report: no samples")
	}
	return s, nil
}

// printShares prints the shares of at least minPct, largest first.
func printShares(title string, shares map[string]float64, minPct float64) {
	keys := slices.Collect(maps.Keys(shares))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Compare(shares[b], shares[a]) })
	fmt.Printf("\n| %s | %% of samples |\n|---|---|\n", title)
	for _, k := range keys {
		if shares[k] >= minPct {
			fmt.Printf("| %s | %.1f |\n", k, shares[k])
		}
	}
}
