// Command cdpbench measures the automation endpoint against CDP spoken
// straight to a Chromium of this host, in the same run, rounds alternated:
//   - a command's round trip (Runtime.evaluate "1" in the page, one at a
//     time): through the public address, the proxy and the worker's gate,
//     vs a raw connection to a Chromium's DevTools port;
//   - pipelined throughput: the same command with -depths commands in
//     flight (-pipe-n of them), commands/s through the cluster vs direct,
//     with the CPU time per command of each side's processes (/proc: the
//     Chromium, this client, and with -up-pid cloudbrowser up's own process
//     (master and embedded proxy) and its worker) and of the whole machine;
//   - a session's start (POST /api/v1/sessions, connect, attach to its
//     page, first answer) of -app (no pool of its own: with the worker's
//     general pool empty, --general-pool-min 0, its browser is made on
//     demand: cold) and of -warm-app (a pooled app: a warm browser its init
//     sequence already prepared), vs a new browser context and page in the
//     local Chromium (Target.createBrowserContext, createTarget, attach,
//     first answer): what an automation client waits for either way;
//   - with -idle K1,K2 and -up-pid, idle automated sessions per GiB: K
//     sessions of -app connected and idle, the PSS of the worker's process
//     tree (the Go worker and its Chromium processes) after -settle, less
//     the same with no session open.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/cdpraw"

	"github.com/cloudbrowser-go/cloudbrowser/internal/procfs"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium"
)

type config struct {
	public, token, app, warmApp, chromium string
	rounds, n, pipeN                      int
	depths, idle                          []int
	upPid                                 int
	settle                                time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.public, "public", "http://127.0.0.1:8080", "public URL (the API is there with cloudbrowser up)")
	tokenFile := flag.String("token-file", "", "the automation token's file (<data-dir>/automation.token)")
	flag.StringVar(&c.app, "app", "reading", "app without a pool of its own whose browsers the sessions open (cold with --general-pool-min 0)")
	flag.StringVar(&c.warmApp, "warm-app", "", "app with a warm pool (e.g. pooldemo): its session start is measured too (\"\": not measured)")
	flag.StringVar(&c.chromium, "chromium", "", "Chromium binary of the direct baseline (default: the one the worker runs, chromium.Find)")
	flag.IntVar(&c.rounds, "rounds", 5, "sessions (and baseline contexts) measured (0: only -idle)")
	flag.IntVar(&c.n, "n", 300, "round trips measured per session")
	depths := flag.String("depths", "16,64", "commands in flight of the pipelined throughput (\"\": not measured)")
	flag.IntVar(&c.pipeN, "pipe-n", 5000, "commands per pipelined measurement")
	idle := flag.String("idle", "", "idle sessions per GiB: open this many sessions of -app, cumulatively (e.g. 10,20; needs -up-pid)")
	flag.IntVar(&c.upPid, "up-pid", 0, "pid of cloudbrowser up: its worker's memory for -idle, and the CPU of up, the worker and its Chromium during the pipelined rounds")
	flag.DurationVar(&c.settle, "settle", 15*time.Second, "idle time before each memory sample of -idle")
	flag.Parse()
	tok, err := os.ReadFile(*tokenFile)
	if err != nil {
		log.Fatalf("cdpbench: -token-file: %v", err)
	}
	c.token = strings.TrimSpace(string(tok))
	if c.depths, err = ints(*depths); err != nil {
		log.Fatalf("cdpbench: -depths: %v", err)
	}
	if c.idle, err = ints(*idle); err != nil {
		log.Fatalf("cdpbench: -idle: %v", err)
	}
	if c.chromium == "" {
		if c.chromium, err = chromium.Find("", false); err != nil {
			log.Fatalf("cdpbench: %v", err)
		}
	}
	if c.rounds > 0 {
		if err := run(c); err != nil {
			log.Fatalf("cdpbench: %v", err)
		}
	}
	if len(c.idle) > 0 {
		if err := idleSessions(c); err != nil {
			log.Fatalf("cdpbench: idle sessions: %v", err)
		}
	}
}

func ints(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// measured is what one side (direct or gated) collected over the rounds.
type measured struct {
	rtt   []time.Duration
	start []time.Duration
	pipe  map[int][]float64 // depth → commands/s, one per round
	cpu   map[int]cpuUse    // depth → CPU ticks by process group, all rounds
}

func (m *measured) add(r round) {
	m.rtt = append(m.rtt, r.rtt...)
	m.start = append(m.start, r.start)
	if m.pipe == nil {
		m.pipe = map[int][]float64{}
	}
	for d, v := range r.pipe {
		m.pipe[d] = append(m.pipe[d], v)
	}
	if m.cpu == nil {
		m.cpu = map[int]cpuUse{}
	}
	for d, u := range r.cpu {
		m.cpu[d] = m.cpu[d].plus(u)
	}
}

// round is one session's (or baseline context's) figures.
type round struct {
	start time.Duration
	rtt   []time.Duration
	pipe  map[int]float64
	cpu   map[int]cpuUse
}

func run(c config) error {
	log.Printf("direct baseline: %s", c.chromium)
	direct, stop, err := startChromium(c.chromium)
	if err != nil {
		return err
	}
	defer stop()
	// Untimed: the first context of the local Chromium, the first session
	// of each app (which creates the warm app's pool on the worker), then
	// time for the pool to fill.
	warm := c
	warm.n, warm.depths = 10, nil
	if _, err := directRound(direct, warm); err != nil {
		return err
	}
	for _, app := range []string{c.app, c.warmApp} {
		if app == "" {
			continue
		}
		if _, err := gatedRound(warm, app, true); err != nil {
			return err
		}
	}
	time.Sleep(5 * time.Second)
	var d, g, w measured
	for r := range c.rounds {
		steps := []func() error{
			func() error {
				res, err := directRound(direct, c)
				d.add(res)
				return err
			},
			func() error {
				res, err := gatedRound(c, c.app, true)
				g.add(res)
				return err
			},
		}
		if c.warmApp != "" {
			steps = append(steps, func() error {
				res, err := gatedRound(c, c.warmApp, false)
				w.add(res)
				return err
			})
		}
		// Rotate who goes first: the host's noise falls on all alike.
		for i := range steps {
			if err := steps[(i+r)%len(steps)](); err != nil {
				return err
			}
		}
		// Let a returned pooled browser run its back sequence.
		time.Sleep(time.Second)
	}
	fmt.Printf("CDP through the automation endpoint vs straight to a Chromium, %d rounds of %d round trips (%d CPUs)\n", c.rounds, c.n, runtime.NumCPU())
	fmt.Printf("%-40s %12s %12s %8s\n", "", "direct", "gated", "ratio")
	for _, q := range []float64{0.5, 0.99} {
		dq, gq := quantile(d.rtt, q), quantile(g.rtt, q)
		fmt.Printf("%-40s %12s %12s %7.2fx\n", fmt.Sprintf("round trip p%g", q*100), dq.Round(time.Microsecond), gq.Round(time.Microsecond), float64(gq)/float64(dq))
	}
	for _, depth := range c.depths {
		dv, gv := median(d.pipe[depth]), median(g.pipe[depth])
		fmt.Printf("%-40s %12.0f %12.0f %7.2fx\n", fmt.Sprintf("pipelined, %d in flight (commands/s)", depth), dv, gv, gv/dv)
	}
	ds, gs := quantile(d.start, 0.5), quantile(g.start, 0.5)
	fmt.Printf("%-40s %12s %12s %7.2fx\n", "session start, cold "+c.app+" (median)", ds.Round(time.Millisecond), gs.Round(time.Millisecond), float64(gs)/float64(ds))
	if c.warmApp != "" {
		ws := quantile(w.start, 0.5)
		fmt.Printf("%-40s %12s %12s %7.2fx\n", "session start, warm "+c.warmApp+" (median)", ds.Round(time.Millisecond), ws.Round(time.Millisecond), float64(ws)/float64(ds))
		fmt.Printf("%-40s %12s %12s %7.2fx\n", "warm pooled vs cold session start", gs.Round(time.Millisecond), ws.Round(time.Millisecond), float64(ws)/float64(gs))
		fmt.Printf("  every start (ms): direct %s; cold %s; warm %s\n", msList(d.start), msList(g.start), msList(w.start))
	} else {
		fmt.Printf("  every start (ms): direct %s; gated %s\n", msList(d.start), msList(g.start))
	}
	for _, depth := range c.depths {
		fmt.Printf("  pipelined %d, every round (commands/s): direct %s; gated %s\n", depth, floatList(d.pipe[depth]), floatList(g.pipe[depth]))
		fmt.Printf("    CPU per command (µs), direct: %s\n", cpuLine(d.cpu[depth], []string{"Chromium", "cdpbench"}))
		fmt.Printf("    CPU per command (µs), gated:  %s\n", cpuLine(g.cpu[depth], []string{"Chromium", "worker", "master+proxy", "cdpbench"}))
		// On a host shared with other work the commands/s ratio follows
		// whoever else runs; the CPU each side's own processes spend per
		// command does not, and bounds the throughput of a CPU-bound host.
		dc, gc := d.cpu[depth].sum("Chromium", "cdpbench"), g.cpu[depth].sum("Chromium", "worker", "master+proxy", "cdpbench")
		if gc > 0 {
			fmt.Printf("    CPU-bound ratio (direct / gated CPU per command of their own processes): %.0f / %.0f µs = %.2fx\n", dc, gc, dc/gc)
		}
	}
	return nil
}

// startChromium runs a Chromium with a DevTools port and returns its
// browser endpoint. The line Chromium prints is parsed here: the worker's
// parser (worker/browser/chromium's lineLogger) is not exported.
func startChromium(bin string) (string, func(), error) {
	dir, err := os.MkdirTemp("", "cdpbench")
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-background-networking", "--no-first-run",
		"--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1", "--user-data-dir="+filepath.Join(dir, "profile"), "about:blank")
	// Its own process group, killed whole (a wrapper script would otherwise
	// leave the real Chromium running), and killed if we die.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start %s: %w", bin, err)
	}
	directPid = cmd.Process.Pid
	stop := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		_ = os.RemoveAll(dir)
	}
	found := make(chan string, 1)
	go func() {
		// Read to the end: Chromium must never block on a full pipe.
		r := bufio.NewReader(stderr)
		for {
			line, err := r.ReadString('\n')
			if u, ok := strings.CutPrefix(strings.TrimSpace(line), "DevTools listening on "); ok {
				select {
				case found <- u:
				default:
				}
			}
			if err != nil {
				return
			}
		}
	}()
	select {
	case u := <-found:
		return u, stop, nil
	case <-time.After(20 * time.Second):
		stop()
		return "", nil, errors.New("chromium printed no DevTools address")
	}
}

// conn is a raw CDP connection, one command at a time (or pipelined).
type conn struct{ cdpraw.Conn }

func dial(u string) (*conn, error) {
	ws, _, err := websocket.DefaultDialer.Dial(u, nil)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	ws.SetReadLimit(64 << 20)
	return &conn{cdpraw.Conn{WS: ws}}, nil
}

// call sends one command and reads up to its answer (events are skipped).
func (c *conn) call(session, method string, params any, result any) error {
	return c.Call(session, method, params, result)
}

// roundTrips measures n evaluations in session.
func (c *conn) roundTrips(session string, n int) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if err := c.call(session, "Runtime.evaluate", map[string]any{"expression": "1", "returnByValue": true}, nil); err != nil {
			return nil, err
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}

// pipelined sends count evaluations in session with up to depth of them
// unanswered at any time and returns the answers per second.
func (c *conn) pipelined(session string, depth, count int) (float64, error) {
	sid, _ := json.Marshal(session)
	first := c.Next + 1
	frames := make([][]byte, count)
	for i := range frames {
		frames[i] = fmt.Appendf(nil, `{"id":%d,"method":"Runtime.evaluate","params":{"expression":"1","returnByValue":true},"sessionId":%s}`, first+i, sid)
	}
	c.Next += count
	slots := make(chan struct{}, depth)
	werr := make(chan error, 1)
	c.WS.SetReadDeadline(time.Now().Add(2 * time.Minute))
	defer c.WS.SetReadDeadline(time.Time{})
	t0 := time.Now()
	go func() {
		for _, f := range frames {
			slots <- struct{}{}
			if err := c.WS.WriteMessage(websocket.TextMessage, f); err != nil {
				werr <- err
				return
			}
		}
		werr <- nil
	}()
	for got := 0; got < count; {
		_, raw, err := c.WS.ReadMessage()
		if err != nil {
			return 0, err
		}
		var r struct {
			ID    int             `json:"id"`
			Error json.RawMessage `json:"error"`
		}
		if json.Unmarshal(raw, &r) != nil || r.ID < first || r.ID >= first+count {
			continue // an event
		}
		if r.Error != nil {
			return 0, fmt.Errorf("pipelined Runtime.evaluate: %s", r.Error)
		}
		got++
		<-slots
	}
	elapsed := time.Since(t0)
	if err := <-werr; err != nil {
		return 0, err
	}
	return float64(count) / elapsed.Seconds(), nil
}

// measure runs the round trips and the pipelined measurements in session,
// with the CPU time of groups' processes during the latter.
func (c *conn) measure(session string, cfg config, groups groupsFunc, res *round) error {
	var err error
	if res.rtt, err = c.roundTrips(session, cfg.n); err != nil {
		return err
	}
	res.pipe, res.cpu = map[int]float64{}, map[int]cpuUse{}
	for _, depth := range cfg.depths {
		if _, err := c.pipelined(session, depth, min(200, cfg.pipeN)); err != nil { // warm-up
			return err
		}
		before, err := sampleCPU(groups)
		if err != nil {
			return err
		}
		if res.pipe[depth], err = c.pipelined(session, depth, cfg.pipeN); err != nil {
			return err
		}
		if res.cpu[depth], err = before.since(cfg.pipeN); err != nil {
			return err
		}
	}
	return nil
}

// groupsFunc names the processes whose CPU a measurement records.
type groupsFunc func(all map[int]procfs.Stat) map[string][]int

// cpuUse is the CPU time, in ticks, of each process group (and of the
// whole machine, "machine") over cmds pipelined commands.
type cpuUse struct {
	cmds  int
	ticks map[string]uint64
}

func (u cpuUse) plus(v cpuUse) cpuUse {
	out := cpuUse{cmds: u.cmds + v.cmds, ticks: map[string]uint64{}}
	for _, m := range []map[string]uint64{u.ticks, v.ticks} {
		for k, t := range m {
			out.ticks[k] += t
		}
	}
	return out
}

// µs is a group's CPU per command in microseconds.
func (u cpuUse) µs(group string) float64 {
	if u.cmds == 0 {
		return 0
	}
	return float64(u.ticks[group]) * 1e6 / procfs.TicksPerSecond / float64(u.cmds)
}

// sum is the CPU per command of groups together, in microseconds.
func (u cpuUse) sum(groups ...string) float64 {
	var t float64
	for _, g := range groups {
		t += u.µs(g)
	}
	return t
}

// cpuSample is the groups' processes and their ticks at one moment.
type cpuSample struct {
	groups  map[string][]int
	ticks   map[string]uint64
	machine uint64
}

func sampleCPU(groups groupsFunc) (cpuSample, error) {
	all, err := procfs.ReadAll()
	if err != nil {
		return cpuSample{}, err
	}
	s := cpuSample{groups: groups(all), ticks: map[string]uint64{}}
	for g, pids := range s.groups {
		for _, pid := range pids {
			s.ticks[g] += all[pid].UTime + all[pid].STime
		}
	}
	s.machine, err = machineBusy()
	return s, err
}

// since is the CPU each group (the same processes) and the machine used
// since s, over cmds commands.
func (s cpuSample) since(cmds int) (cpuUse, error) {
	all, err := procfs.ReadAll()
	if err != nil {
		return cpuUse{}, err
	}
	u := cpuUse{cmds: cmds, ticks: map[string]uint64{}}
	for g, pids := range s.groups {
		var t uint64
		for _, pid := range pids {
			if st, ok := all[pid]; ok {
				t += st.UTime + st.STime
			}
		}
		u.ticks[g] = t - min(t, s.ticks[g]) // a process that ended takes its ticks along
	}
	m, err := machineBusy()
	u.ticks["machine"] = m - min(m, s.machine)
	return u, err
}

// machineBusy is the machine's busy CPU ticks (/proc/stat: all but idle
// and iowait).
func machineBusy() (uint64, error) {
	b, err := os.ReadFile(filepath.Join(procfs.Dir, "stat"))
	if err != nil {
		return 0, err
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	fields := strings.Fields(string(line))
	if len(fields) < 6 || fields[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected %q", line)
	}
	var busy uint64
	for i, f := range fields[1:min(len(fields), 9)] { // guest time is already in user
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, err
		}
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, nil
}

// cpuLine prints a side's CPU per command by group, the named groups
// first, then the rest of the machine.
func cpuLine(u cpuUse, groups []string) string {
	var parts []string
	var known float64
	for _, g := range groups {
		if _, ok := u.ticks[g]; !ok {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.0f", g, u.µs(g)))
		known += u.µs(g)
	}
	parts = append(parts, fmt.Sprintf("other processes %.0f", max(0, u.µs("machine")-known)), fmt.Sprintf("(machine %.0f)", u.µs("machine")))
	return strings.Join(parts, ", ")
}

// attach attaches to target and returns the session.
func (c *conn) attach(target string) (string, error) {
	var a struct {
		SessionID string `json:"sessionId"`
	}
	err := c.call("", "Target.attachToTarget", map[string]any{"targetId": target, "flatten": true}, &a)
	return a.SessionID, err
}

func directRound(browserURL string, cfg config) (round, error) {
	var res round
	t0 := time.Now()
	c, err := dial(browserURL)
	if err != nil {
		return res, err
	}
	defer c.WS.Close()
	var bc struct {
		BrowserContextID string `json:"browserContextId"`
	}
	if err := c.call("", "Target.createBrowserContext", map[string]any{"disposeOnDetach": true}, &bc); err != nil {
		return res, err
	}
	var tg struct {
		TargetID string `json:"targetId"`
	}
	if err := c.call("", "Target.createTarget", map[string]any{"url": "about:blank", "browserContextId": bc.BrowserContextID}, &tg); err != nil {
		return res, err
	}
	s, err := c.attach(tg.TargetID)
	if err != nil {
		return res, err
	}
	if err := c.call(s, "Runtime.evaluate", map[string]any{"expression": "1"}, nil); err != nil {
		return res, err
	}
	res.start = time.Since(t0)
	err = c.measure(s, cfg, directGroups, &res)
	_ = c.call("", "Target.disposeBrowserContext", map[string]any{"browserContextId": bc.BrowserContextID}, nil)
	return res, err
}

// openSession opens a session of app and returns its cdpUrl.
func openSession(public, token, app string) (string, error) {
	body, _ := json.Marshal(map[string]any{"app": app})
	req, _ := http.NewRequest("POST", public+"/api/v1/sessions", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	var s struct {
		ID     string `json:"id"`
		CDPURL string `json:"cdpUrl"`
		Error  string `json:"error"`
	}
	err = json.NewDecoder(resp.Body).Decode(&s)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("POST /api/v1/sessions (%s): %d %s %v", app, resp.StatusCode, s.Error, err)
	}
	return s.CDPURL, nil
}

// connectSession opens a session of app, connects, attaches to its page
// and has a first command answered.
func connectSession(public, token, app string) (*conn, string, error) {
	u, err := openSession(public, token, app)
	if err != nil {
		return nil, "", err
	}
	c, err := dial(u)
	if err != nil {
		return nil, "", err
	}
	var ts struct {
		TargetInfos []struct {
			TargetID string `json:"targetId"`
			Type     string `json:"type"`
		} `json:"targetInfos"`
	}
	if err := c.call("", "Target.getTargets", nil, &ts); err != nil {
		c.WS.Close()
		return nil, "", err
	}
	page := ""
	for _, ti := range ts.TargetInfos {
		if ti.Type == "page" {
			page = ti.TargetID
		}
	}
	if page == "" {
		c.WS.Close()
		return nil, "", errors.New("the session shows no page")
	}
	sid, err := c.attach(page)
	if err == nil {
		err = c.call(sid, "Runtime.evaluate", map[string]any{"expression": "1"}, nil)
	}
	if err != nil {
		c.WS.Close()
		return nil, "", err
	}
	return c, sid, nil
}

// gatedRound measures a session's start, and with measure its round trips
// and pipelined throughput.
func gatedRound(cfg config, app string, measure bool) (round, error) {
	var res round
	t0 := time.Now()
	c, sid, err := connectSession(cfg.public, cfg.token, app)
	if err != nil {
		return res, err
	}
	defer c.WS.Close() // the session ends with its client (no keep-alive)
	res.start = time.Since(t0)
	if !measure {
		return res, nil
	}
	err = c.measure(sid, cfg, gatedGroups(cfg.upPid), &res)
	return res, err
}

// directPid is the direct baseline's Chromium (startChromium).
var directPid int

func directGroups(all map[int]procfs.Stat) map[string][]int {
	return map[string][]int{"Chromium": procfs.Tree(all, directPid), "cdpbench": {os.Getpid()}}
}

// gatedGroups: cloudbrowser up's own process (the master and its embedded
// proxy), its worker's Go process and the worker's Chromium processes.
func gatedGroups(up int) groupsFunc {
	return func(all map[int]procfs.Stat) map[string][]int {
		g := map[string][]int{"cdpbench": {os.Getpid()}}
		if up == 0 {
			return g
		}
		g["master+proxy"] = []int{up}
		if w, err := workerOf(up); err == nil {
			g["worker"] = []int{w}
			g["Chromium"] = procfs.Tree(all, w)[1:]
		}
		return g
	}
}

// idleSessions opens cfg.idle[i] sessions of cfg.app in steps, leaves them
// connected and idle, and prints the worker tree's PSS against the same
// with none open.
func idleSessions(cfg config) error {
	if cfg.upPid == 0 {
		return errors.New("-idle needs -up-pid")
	}
	worker, err := workerOf(cfg.upPid)
	if err != nil {
		return err
	}
	log.Printf("idle sessions: worker pid %d, settling %v before each sample", worker, cfg.settle)
	time.Sleep(cfg.settle)
	base, err := sampleMem(worker)
	if err != nil {
		return err
	}
	type row struct {
		k   int
		mem mem
	}
	rows := []row{{0, base}}
	var open []*conn
	defer func() {
		for _, c := range open {
			c.WS.Close()
		}
	}()
	for _, k := range cfg.idle {
		for len(open) < k {
			c, _, err := connectSession(cfg.public, cfg.token, cfg.app)
			if err != nil {
				return fmt.Errorf("session %d: %w", len(open)+1, err)
			}
			open = append(open, c)
		}
		time.Sleep(cfg.settle)
		m, err := sampleMem(worker)
		if err != nil {
			return err
		}
		rows = append(rows, row{k, m})
	}
	fmt.Printf("\nIdle automated sessions of %s, connected (each its gate and its own Chromium connection), %v idle before each sample\n", cfg.app, cfg.settle)
	fmt.Println("PSS and RSS: the worker's tree (the Go worker and its Chromium processes), median of 3 samples 1 s apart")
	fmt.Printf("%-9s %9s %12s %9s %9s %14s %12s\n", "sessions", "processes", "PSS MiB", "Go MiB", "RSS MiB", "PSS/session", "per GiB")
	for _, r := range rows {
		per, perGiB := "-", "-"
		if r.k > 0 {
			p := (r.mem.pss - base.pss) / float64(r.k)
			per, perGiB = fmt.Sprintf("%.1f MiB", p), fmt.Sprintf("%.0f", 1024/p)
		}
		fmt.Printf("%-9d %9d %12.1f %9.1f %9.1f %14s %12s\n", r.k, r.mem.procs, r.mem.pss, r.mem.goPss, r.mem.rss, per, perGiB)
	}
	return nil
}

// workerOf is the worker process under up (its child running "worker").
func workerOf(up int) (int, error) {
	all, err := procfs.ReadAll()
	if err != nil {
		return 0, err
	}
	for pid, st := range all {
		if st.PPid != up || !st.Alive() {
			continue
		}
		if args, err := procfs.Cmdline(pid); err == nil && slices.Contains(args, "worker") {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no worker process under pid %d", up)
}

// mem is the worker tree's memory in MiB.
type mem struct {
	pss, goPss, rss float64
	procs           int
}

// sampleMem takes 3 readings 1 s apart and keeps the median of each.
func sampleMem(worker int) (mem, error) {
	var pss, goPss, rss []float64
	procs := 0
	for i := range 3 {
		if i > 0 {
			time.Sleep(time.Second)
		}
		all, err := procfs.ReadAll()
		if err != nil {
			return mem{}, err
		}
		var p, g, r uint64
		tree := procfs.Tree(all, worker)
		for _, pid := range tree {
			v, err := procfs.PSS(pid)
			if errors.Is(err, procfs.ErrNoProcess) {
				continue
			}
			if err != nil {
				return mem{}, err
			}
			p += v
			r += all[pid].RSS
			if pid == worker {
				g = v
			}
		}
		pss, goPss, rss = append(pss, mib(p)), append(goPss, mib(g)), append(rss, mib(r))
		procs = len(tree)
	}
	return mem{median(pss), median(goPss), median(rss), procs}, nil
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func msList(d []time.Duration) string {
	var out []string
	for _, v := range d {
		out = append(out, strconv.FormatInt(v.Milliseconds(), 10))
	}
	return strings.Join(out, " ")
}

func floatList(v []float64) string {
	var out []string
	for _, x := range v {
		out = append(out, strconv.FormatFloat(x, 'f', 0, 64))
	}
	return strings.Join(out, " ")
}
