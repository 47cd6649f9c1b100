// Package chromium is a browser.Runtime backed by real Chromium processes,
// driven over the DevTools protocol with chromedp. All chromedp and cdproto
// use is confined to this package and its subpackages, so a protocol
// library change touches nothing else.
//
// A Runtime runs Config.Processes Chromium processes. Each virtual browser
// is an isolated browser context (its own cookies, storage and cache) with
// one page, placed on the process with the fewest browsers. A supervisor per
// process notices when Chromium dies, fails that process's browsers with
// browser.ErrCrashed, removes what is left of it and starts a new one with
// backoff.
//
// Its parts with no need of a browser's state are subpackages: policy (the
// navigation policy's request filters), cdpinput (input events to CDP
// params), pagescript (the scripts it puts in pages), window (page windows
// and screens), profiledir (Chromium's temporary dirs and leftovers) and
// sitedata (cookies in and out, and clearing what sites left for Reset).
package chromium

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/chromedp"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/procfs"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium/policy"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium/profiledir"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium/sitedata"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/procmem"
)

// Config configures a Runtime. The zero value is usable.
type Config struct {
	// Path of the Chromium binary. Default: $CB_CHROMIUM, else the first of
	// chromium, chromium-browser, google-chrome found on $PATH.
	Path string
	// Processes is how many Chromium processes to run (default 1). Browsers
	// are spread over them; a crash takes down only one process's browsers.
	Processes int
	// RendererProcessLimit passes --renderer-process-limit (0 = Chromium's
	// default). Browser contexts never share a renderer, so this only caps
	// extra renderers per context (iframes, popups).
	RendererProcessLimit int
	// ExtraFlags are added to (or override) the default command line, each
	// "--name" or "--name=value". --disable-features and --enable-features
	// add to the runtime's lists instead of replacing them.
	ExtraFlags []string
	// Logger receives structured logs (default: disabled).
	Logger zerolog.Logger
	// Headful shows windows instead of running headless; it needs a
	// display and is for debugging only.
	Headful bool
	// RenderScale, in [MinRenderScale, 1), has Chromium draw every page at
	// that fraction of its pixels (--force-device-scale-factor): a page
	// still lays out at its CSS size and sees devicePixelRatio 1, but its
	// screencast frames have RenderScale × its width and height, at rest
	// too. At 0.5 a frame costs Chromium about 0.7× the CPU of a
	// full-size frame scaled down to the same size (docs/chromium.md,
	// "Render scale"). Captures stay full size. 0 or 1: off.
	RenderScale float64
	// DevTools opens each Chromium's DevTools port on loopback (port 0:
	// Chromium picks), where the automation endpoint's gate opens a CDP
	// connection of its own per session (browser.DevTools). The runtime
	// itself keeps speaking over its pipe. Off: no port, no automation.
	DevTools bool

	// Health check timing; tests shorten it.
	healthInterval, healthTimeout time.Duration
	// gcMinGarbage is the least number of new documents in a renderer that
	// makes its browser ask for a garbage collection (gc.go): 0 = default,
	// negative = never (benchmarks compare).
	gcMinGarbage int
}

const (
	// Restart backoff after a crash or a failed start: doubled per
	// consecutive failure, reset once a process stayed up stableAfter.
	minBackoff  = 100 * time.Millisecond
	maxBackoff  = 10 * time.Second
	stableAfter = 30 * time.Second
	// startTimeout bounds one Chromium start made by the supervisor.
	startTimeout = 60 * time.Second
	// A Chromium that does not answer a trivial command for healthTimeout,
	// checked every healthInterval, is hung: it is killed and restarted
	// like a crashed one.
	defaultHealthInterval = 15 * time.Second
	defaultHealthTimeout  = 20 * time.Second
)

// Runtime implements browser.Runtime with Chromium.
type Runtime struct {
	cfg   Config
	log   zerolog.Logger
	path  string
	flags []chromedp.ExecAllocatorOption
	scale float64 // Config.RenderScale; 1 when off

	ctx    context.Context // ends on Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // supervisors, browser loops, background closes

	pss procmem.Cache // Stats' memory readings

	mu      sync.Mutex
	closed  bool
	slots   []*slot
	changed chan struct{} // closed (and replaced) when a process comes up
	nextID  uint64

	blocked atomic.Uint64 // requests denied by navigation policies
	// resizeRestarts counts the screencasts restarted after a resize
	// (Stats.ResizeRestarts).
	resizeRestarts atomic.Uint64
}

var _ browser.Runtime = (*Runtime)(nil)

// RenderScale is Config.RenderScale in effect: 1 when off. The worker
// reports it to the master, for the admin dashboard.
func (r *Runtime) RenderScale() float64 { return r.scale }

// slot is one of the Config.Processes positions; its process is replaced
// when it dies.
type slot struct {
	idx  int
	proc *process // nil while (re)starting; guarded by Runtime.mu
}

// process is one running Chromium.
type process struct {
	slot        *slot
	pid         int
	dir         string // temporary dir (profile, config, crash dumps), removed when it stops
	started     time.Time
	allocCancel context.CancelFunc
	rootCtx     context.Context // ends when Chromium dies or is stopped
	rootCancel  context.CancelFunc
	browser     *chromedp.Browser

	// guarded by Runtime.mu
	dead     bool
	browsers map[*cbrowser]struct{}

	// filters is the request filter hub of this process's browsers that
	// have a navigation policy.
	filters *policy.Hub
	// devtools is the DevTools port's browser endpoint (ws://…; "" with
	// Config.DevTools off).
	devtools string
}

// New starts cfg.Processes Chromium processes and returns when all are up.
// ctx bounds only the start.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	scale, err := renderScale(cfg) // a bad setting before a missing binary
	if err != nil {
		return nil, err
	}
	path, err := findChromium(cfg.Path, cfg.Headful)
	if err != nil {
		return nil, err
	}
	config.OrDefault(&cfg.Processes, 1)
	if cfg.healthInterval <= 0 {
		cfg.healthInterval, cfg.healthTimeout = defaultHealthInterval, defaultHealthTimeout
	}
	flags, err := allocatorOptions(path, cfg)
	if err != nil {
		return nil, err
	}
	r := &Runtime{
		cfg:     cfg,
		scale:   scale,
		log:     cfg.Logger.With().Str("component", "chromium").Logger(),
		path:    path,
		flags:   flags,
		changed: make(chan struct{}),
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	profiledir.RemoveStale(os.TempDir(), r.log)

	// Start all processes in parallel; a start error fails New, since it
	// most likely means a broken binary or flags.
	procs := make([]*process, cfg.Processes)
	errs := make([]error, cfg.Processes)
	var wg sync.WaitGroup
	for i := range procs {
		r.slots = append(r.slots, &slot{idx: i})
	}
	for i, s := range r.slots {
		wg.Go(func() { procs[i], errs[i] = r.start(ctx, s) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, p := range procs {
			if p != nil {
				r.stop(p)
			}
		}
		return nil, err
	}
	for i, s := range r.slots {
		s.proc = procs[i] // usable as soon as New returns
		r.wg.Add(1)
		go r.supervise(s, procs[i])
	}
	r.log.Info().Str("path", path).Int("processes", cfg.Processes).Msg("chromium runtime started")
	return r, nil
}

// Binaries is where the runtime looks for Chromium, in order, when neither
// Config.Path nor CB_CHROMIUM names one. The headless shell (Debian's
// chromium-headless-shell, Chrome for Testing's chrome-headless-shell) comes
// first: it has no browser UI, while full Chromium 156 gives every browser
// context a window whose omnibox popup WebUI runs in a renderer of its own
// (2 renderers per virtual browser instead of 1, 67 instead of 28 MiB PSS
// each, creation p50 ~480 instead of ~200 ms; docs/chromium.md, density).
// Debian's /usr/bin wrapper of the shell does not exec, so its real binary
// is named first.
var Binaries = []string{"/usr/lib/chromium/chromium-headless-shell", "chromium-headless-shell", "chrome-headless-shell",
	"chromium", "chromium-browser", "google-chrome"}

// headlessShell reports whether path is a headless shell (no windows).
func headlessShell(path string) bool { return strings.Contains(filepath.Base(path), "headless-shell") }

// Find returns the Chromium binary New would use for Config.Path = path
// (headful: one that can show windows).
func Find(path string, headful bool) (string, error) { return findChromium(path, headful) }

// findChromium resolves Config.Path.
func findChromium(path string, headful bool) (string, error) {
	if path == "" {
		path = os.Getenv("CB_CHROMIUM")
	}
	if path != "" {
		p, err := exec.LookPath(path)
		if err != nil {
			return "", fmt.Errorf("chromium: %w", err)
		}
		return p, nil
	}
	for _, name := range Binaries {
		if headful && headlessShell(name) {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("chromium: no binary found (set CB_CHROMIUM, or install chromium-headless-shell or chromium)")
}

// disabledFeatures are Chromium features that only phone home or add UI a
// remote browser has no use for, and the back-forward cache.
//
// The back-forward cache keeps each browser's last 6 pages alive in its
// renderer, frozen, for instant back/forward. That costs every navigating
// browser their memory (150 vs 250 MB RSS after 50 loads of a page with 50
// SVG images), and Blink's scheduler still visits every cached document's
// agent after every task: in the same test loads took twice as long, and
// each renderer garbage collection (gc.go) 2.3 times. Without it, back and
// forward load the page again, as for pages the cache refuses anyway. It
// can be turned back on with --enable-features=BackForwardCache in
// ExtraFlags. See docs/chromium.md, "Long-lived browsers".
var disabledFeatures = []string{
	"Translate", "MediaRouter", "OptimizationHints", "AutofillServerCommunication",
	"CertificateTransparencyComponentUpdater", "InterestFeedContentSuggestions",
	"BackForwardCache",
}

// MinRenderScale is the smallest Config.RenderScale: below a quarter text
// is no longer legible, and the CPU saved stops growing (docs/chromium.md).
const MinRenderScale = 0.25

// renderScale is cfg.RenderScale checked: 1 when off.
func renderScale(cfg Config) (float64, error) {
	switch s := cfg.RenderScale; {
	case s == 0 || s == 1:
		return 1, nil
	case s >= MinRenderScale && s < 1:
		return s, nil
	default: // also NaN
		return 0, config.Errorf("RenderScale", "%v is not within [%v, 1]", s, MinRenderScale)
	}
}

// allocatorOptions builds the Chromium command line.
func allocatorOptions(path string, cfg Config) ([]chromedp.ExecAllocatorOption, error) {
	scale, err := renderScale(cfg)
	if err != nil {
		return nil, err
	}
	// chromedp's defaults are Puppeteer's quiet flags: no first run, no
	// default-browser check, no background networking, sync, extensions,
	// breakpad or component updates, metrics recording only, muted audio.
	opts := append([]chromedp.ExecAllocatorOption{}, chromedp.DefaultExecAllocatorOptions[:]...)
	opts = append(opts,
		chromedp.ExecPath(path),
		// --enable-automation sets navigator.webdriver, which sites treat
		// as a bot; these are real users' browsers.
		chromedp.Flag("enable-automation", false),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("disable-notifications", true),
		chromedp.Flag("deny-permission-prompts", true),
		// Browsers with an egress proxy must not reach the network around
		// it: WebRTC may send UDP only through the proxy (that is, never).
		chromedp.Flag("force-webrtc-ip-handling-policy", "disable_non_proxied_udp"),
		chromedp.Flag("webrtc-ip-handling-policy", "disable_non_proxied_udp"),
		chromedp.Flag("window-size", fmt.Sprintf("%d,%d", browser.DefaultWidth, browser.DefaultHeight)),
	)
	if os.Geteuid() == 0 {
		// Chromium refuses to run as root with its sandbox.
		opts = append(opts, chromedp.NoSandbox)
	}
	if cfg.RendererProcessLimit > 0 {
		opts = append(opts, chromedp.Flag("renderer-process-limit", strconv.Itoa(cfg.RendererProcessLimit)))
	}
	if cfg.Headful {
		opts = append(opts, chromedp.VisibleWindow)
	}
	if scale < 1 {
		// The screen's scale, not an emulated one: only it shrinks what
		// the compositor draws and the screencast reads back. An emulated
		// device scale factor changes the raster but not the view's size.
		opts = append(opts, chromedp.Flag("force-device-scale-factor", strconv.FormatFloat(scale, 'f', -1, 64)))
	}
	var disable, enable []string
	for _, f := range cfg.ExtraFlags {
		name, value, hasValue := strings.Cut(strings.TrimPrefix(f, "--"), "=")
		if name == "" || !strings.HasPrefix(f, "--") {
			return nil, fmt.Errorf("chromium: bad flag %q (want --name or --name=value)", f)
		}
		switch name {
		case "user-data-dir", "remote-debugging-pipe", "remote-debugging-port", "single-process",
			"force-device-scale-factor":
			return nil, fmt.Errorf("chromium: flag --%s is managed by the runtime", name)
		case "disable-features":
			// Feature lists add up instead of replacing the defaults.
			disable = append(disable, strings.Split(value, ",")...)
			continue
		case "enable-features":
			enable = append(enable, strings.Split(value, ",")...)
			continue
		}
		if hasValue {
			opts = append(opts, chromedp.Flag(name, value))
		} else {
			opts = append(opts, chromedp.Flag(name, true))
		}
	}
	disable = append(defaultDisabled(enable), disable...)
	opts = append(opts, chromedp.Flag("disable-features", strings.Join(disable, ",")))
	if len(enable) > 0 {
		opts = append(opts, chromedp.Flag("enable-features", strings.Join(enable, ",")))
	}
	return opts, nil
}

// defaultDisabled returns disabledFeatures without the ones enable turns
// on (a feature may carry parameters: "Name:param/value").
func defaultDisabled(enable []string) []string {
	return slices.DeleteFunc(slices.Clone(disabledFeatures), func(f string) bool {
		return slices.ContainsFunc(enable, func(e string) bool {
			name, _, _ := strings.Cut(e, ":")
			name, _, _ = strings.Cut(name, "<") // field trial: "Name<Trial"
			return name == f
		})
	})
}

// minGarbageDocs is gcLoop's threshold; 0 = no gcLoop.
func (r *Runtime) minGarbageDocs() int64 {
	switch n := r.cfg.gcMinGarbage; {
	case n < 0:
		return 0
	case n == 0:
		return defaultMinGarbageDocs
	default:
		return int64(n)
	}
}

// Name implements browser.Runtime.
func (r *Runtime) Name() string { return "chromium" }

// start launches one Chromium for s.
func (r *Runtime) start(ctx context.Context, s *slot) (*process, error) {
	dir, err := profiledir.Make()
	if err != nil {
		return nil, fmt.Errorf("chromium: profile dir: %w", err)
	}
	log := r.log.With().Int("slot", s.idx).Logger()
	out := &lineLogger{log: log, found: make(chan struct{})}
	opts := append(append([]chromedp.ExecAllocatorOption{}, r.flags...),
		chromedp.UserDataDir(profiledir.Profile(dir)),
		chromedp.Env(profiledir.Env(dir)...),
		chromedp.CombinedOutput(out),
	)
	if r.cfg.DevTools {
		opts = append(opts, chromedp.ModifyCmdFunc(withDevToolsPort))
	}
	// The process must outlive ctx, so it hangs off Background and ctx
	// only aborts the start.
	allocCtx, allocCancel := chromedp.NewExecAllocator(context.Background(), opts...)
	rootCtx, rootCancel := chromedp.NewContext(allocCtx, chromedp.WithBrowserOption(
		chromedp.WithBrowserLogf(func(f string, a ...any) { log.Debug().Msgf(f, a...) }),
		chromedp.WithBrowserErrorf(func(f string, a ...any) { log.Debug().Str("source", "chromedp").Msgf(f, a...) }),
	))
	// chromedp's cancel blocks for ever when called twice before the
	// browser was allocated; the abort below and the error path may both
	// call it.
	rootCancel = sync.OnceFunc(rootCancel)
	t0 := time.Now()
	stop := context.AfterFunc(ctx, rootCancel)
	err = chromedp.Do(rootCtx)
	stop()
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		rootCancel()
		allocCancel()
		_ = profiledir.Drop(dir)
		return nil, fmt.Errorf("chromium: start %s: %w", r.path, err)
	}
	c := chromedp.FromContext(rootCtx)
	b := c.Browser
	// Chromium starts with a blank tab in the default context; nothing
	// uses it, and its renderer costs ~25 MB. (A headful Chromium would
	// quit with its last window.)
	if !r.cfg.Headful {
		if err := sitedata.CloseTarget(ctx, b, c.Target.TargetID); err != nil {
			log.Warn().Err(err).Msg("closing the initial tab")
		}
	}
	p := &process{
		slot:        s,
		pid:         b.Process().Pid,
		dir:         dir,
		started:     time.Now(),
		allocCancel: allocCancel,
		rootCtx:     rootCtx,
		rootCancel:  rootCancel,
		browser:     b,
		browsers:    map[*cbrowser]struct{}{},
		filters:     policy.NewHub(rootCtx, b, log),
	}
	if r.cfg.DevTools {
		// Chromium prints it as it starts; its output is copied on a
		// goroutine of chromedp's, maybe not yet.
		select {
		case <-out.found:
			p.devtools = out.devToolsURL()
		case <-time.After(5 * time.Second):
			log.Warn().Msg("chromium printed no DevTools address: no automation on this process")
		}
	}
	log.Info().Int("pid", p.pid).Dur("took", time.Since(t0)).Msg("chromium started")
	return p, nil
}

// supervise keeps slot s running until Close, starting with p.
func (r *Runtime) supervise(s *slot, p *process) {
	defer r.wg.Done()
	log := r.log.With().Int("slot", s.idx).Logger()
	backoff := minBackoff
	for {
		if p != nil {
			r.mu.Lock()
			s.proc = p
			close(r.changed)
			r.changed = make(chan struct{})
			r.mu.Unlock()

			r.watch(p)
			closing := r.ctx.Err() != nil
			if !closing {
				log.Error().Int("pid", p.pid).Dur("uptime", time.Since(p.started)).Msg("chromium died; restarting")
				if time.Since(p.started) >= stableAfter {
					backoff = minBackoff
				}
			}
			r.retire(p, closing)
			if closing {
				return
			}
		}
		select {
		case <-time.After(backoff):
		case <-r.ctx.Done():
			return
		}
		backoff = min(2*backoff, maxBackoff)
		ctx, cancel := context.WithTimeout(r.ctx, startTimeout)
		var err error
		p, err = r.start(ctx, s)
		cancel()
		if err != nil {
			if r.ctx.Err() != nil {
				return
			}
			log.Error().Err(err).Dur("backoff", backoff).Msg("chromium restart failed")
		}
	}
}

// watch returns when p died or the runtime closes. It kills p if it stops
// answering.
func (r *Runtime) watch(p *process) {
	tick := time.NewTicker(r.cfg.healthInterval)
	defer tick.Stop()
	for {
		select {
		case <-p.rootCtx.Done():
			return
		case <-r.ctx.Done():
			return
		case <-tick.C:
			ctx, cancel := context.WithTimeout(p.rootCtx, r.cfg.healthTimeout)
			_, err := cdp.Call(ctx, p.browser, cdpbrowser.GetVersion, cdp.Empty{})
			cancel()
			if err != nil && p.rootCtx.Err() == nil && r.ctx.Err() == nil {
				r.log.Error().Err(err).Int("slot", p.slot.idx).Int("pid", p.pid).Msg("chromium not answering; killing it")
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
				<-p.rootCtx.Done()
				return
			}
		}
	}
}

// retire takes p out of service: its browsers end (crashed, or closed when
// the runtime closes) and the process and its leftovers go away.
func (r *Runtime) retire(p *process, closing bool) {
	r.mu.Lock()
	if p.slot.proc == p {
		p.slot.proc = nil
	}
	p.dead = true
	bs := make([]*cbrowser, 0, len(p.browsers))
	for b := range p.browsers {
		bs = append(bs, b)
	}
	r.mu.Unlock()

	cause := browser.ErrClosed
	if !closing {
		cause = fmt.Errorf("chromium process %d died: %w", p.pid, browser.ErrCrashed)
	}
	// Mark first, so clients learn at once; releasing the browsers' chromedp
	// contexts is quick once the process is gone.
	for _, b := range bs {
		b.markDone(cause)
	}
	r.stop(p)
	for _, b := range bs {
		b.release()
	}
}

// stop kills p's Chromium and removes everything it left.
func (r *Runtime) stop(p *process) {
	p.rootCancel() // kills the process and waits for it
	p.allocCancel()
	if err := profiledir.Drop(p.dir); err != nil {
		r.log.Warn().Err(err).Str("dir", p.dir).Msg("chromium profile not removed")
	}
}

// pick returns the live process with the fewest browsers, waiting while
// all are restarting.
func (r *Runtime) pick(ctx context.Context) (*process, error) {
	for {
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			return nil, browser.ErrClosed
		}
		var best *process
		for _, s := range r.slots {
			if p := s.proc; p != nil && !p.dead && (best == nil || len(p.browsers) < len(best.browsers)) {
				best = p
			}
		}
		changed := r.changed
		r.mu.Unlock()
		if best != nil {
			return best, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("chromium: waiting for a running process: %w", ctx.Err())
		case <-r.ctx.Done():
			return nil, browser.ErrClosed
		}
	}
}

// NewBrowser implements browser.Runtime: a new browser context with one
// page, sized and navigated as opts say. If the chosen Chromium dies during
// the creation, it is tried once more on a live one.
func (r *Runtime) NewBrowser(ctx context.Context, opts browser.Options) (browser.Browser, error) {
	if opts.Width <= 0 || opts.Height <= 0 {
		opts.Width, opts.Height = browser.DefaultWidth, browser.DefaultHeight
	}
	var err error
	for range 2 {
		var p *process
		if p, err = r.pick(ctx); err != nil {
			return nil, err
		}
		var b *cbrowser
		if b, err = r.newBrowser(ctx, p, opts); err == nil {
			return b, nil
		}
		if !errors.Is(err, browser.ErrCrashed) || ctx.Err() != nil {
			break
		}
	}
	if opts.Egress != nil {
		_ = opts.Egress.Close()
	}
	return nil, err
}

// Stats implements browser.Runtime: PSS and process counts cover every
// Chromium main process and its descendants.
func (r *Runtime) Stats(ctx context.Context) (browser.Stats, error) {
	st := browser.Stats{Blocked: r.blocked.Load(), ResizeRestarts: r.resizeRestarts.Load()}
	var pids []int
	r.mu.Lock()
	for _, s := range r.slots {
		if p := s.proc; p != nil {
			pids = append(pids, p.pid)
			st.Browsers += len(p.browsers)
		}
	}
	r.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return st, err
	}
	procs, err := procfs.ReadAll()
	if err != nil {
		return st, fmt.Errorf("chromium: stats: %w", err)
	}
	st.Processes, st.PSS = r.pss.Usage(procs, pids, time.Now())
	return st, nil
}

// Close implements browser.Runtime: every browser ends with ErrClosed and
// every Chromium process is killed and its profile removed. It waits for
// all of the runtime's goroutines.
func (r *Runtime) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
	return nil
}

// track runs fn on a goroutine that Close waits for; after Close it runs
// fn inline, since nothing is left to wait for.
func (r *Runtime) track(fn func()) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		fn()
		return
	}
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		fn()
	}()
}

// withDevToolsPort adds a loopback DevTools port to the pipe chromedp
// speaks over, and does what chromedp does to a command it is not asked to
// change: its Chromium dies with the worker.
func withDevToolsPort(cmd *exec.Cmd) {
	cmd.Args = append(cmd.Args, "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1")
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = new(syscall.SysProcAttr)
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// lineLogger forwards Chromium's stdout/stderr to the debug log a line at
// a time, and notes the DevTools port's address.
type lineLogger struct {
	log      zerolog.Logger
	mu       sync.Mutex
	buf      []byte
	devtools string
	found    chan struct{} // closed once devtools is set (nil: not looked for)
}

// devToolsURL is the browser endpoint Chromium printed ("" if none).
func (w *lineLogger) devToolsURL() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.devtools
}

func (w *lineLogger) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		if line := strings.TrimSpace(string(w.buf[:i])); line != "" {
			if u, ok := strings.CutPrefix(line, "DevTools listening on "); ok && strings.HasPrefix(u, "ws://127.0.0.1:") && w.devtools == "" && w.found != nil {
				w.devtools = u
				close(w.found)
			}
			w.log.Debug().Str("source", "chromium").Msg(line)
		}
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 64<<10 { // a runaway line without newline
		w.buf = w.buf[:0]
	}
	return len(p), nil
}
