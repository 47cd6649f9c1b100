package cdpgate

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
)

// The tests share one Chromium (its start is the slow part); each test
// makes its own contexts in it.
var (
	chromiumOnce sync.Once
	chromiumURL  string
	chromiumErr  error
	chromiumCmd  *exec.Cmd
	chromiumDir  string
	chromiumWG   sync.WaitGroup // drains its stderr
)

func TestMain(m *testing.M) { testutil.Main(withChromium{m}) }

// withChromium stops the shared Chromium after the tests, so the leak
// check runs after it is gone.
type withChromium struct{ m *testing.M }

func (w withChromium) Run() int {
	defer func() {
		if chromiumCmd != nil {
			// The whole group: a helper process outliving the browser
			// would write into the profile after it is removed.
			syscall.Kill(-chromiumCmd.Process.Pid, syscall.SIGKILL)
			chromiumCmd.Wait()
			chromiumWG.Wait()
			os.RemoveAll(chromiumDir)
		}
	}()
	return w.m.Run()
}

var devtoolsRe = regexp.MustCompile(`DevTools listening on (ws://\S+)`)

// browserURL starts the shared Chromium on first use (the binary the
// product uses: testutil.ChromiumPath) and returns its browser WebSocket
// URL.
func browserURL(t testing.TB) string {
	t.Helper()
	testutil.NeedChromium(t)
	chromiumOnce.Do(func() { chromiumURL, chromiumErr = startChromium() })
	if chromiumErr != nil {
		t.Fatal(chromiumErr)
	}
	return chromiumURL
}

func startChromium() (string, error) {
	dir, err := os.MkdirTemp("", "cdpgate-test-")
	if err != nil {
		return "", err
	}
	chromiumDir = dir
	cmd := exec.Command(testutil.ChromiumPath(), "--headless", "--no-sandbox", "--disable-background-networking",
		"--no-first-run", "--disable-gpu", "--remote-debugging-port=0", "--user-data-dir="+dir, "about:blank")
	cmd.SysProcAttr = chromiumProcAttr()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	chromiumCmd = cmd
	// A Chromium that never says where it listens is killed, which ends
	// the scan below.
	timer := time.AfterFunc(testutil.Scale(30*time.Second), func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	defer timer.Stop()
	r := bufio.NewReader(stderr)
	for {
		line, err := r.ReadString('\n')
		if m := devtoolsRe.FindStringSubmatch(line); m != nil {
			chromiumWG.Go(func() { io.Copy(io.Discard, r) })
			return m[1], nil
		}
		if err != nil {
			return "", errors.New("chromium did not print its DevTools URL")
		}
	}
}

// fixture is one gated session over the shared Chromium: a victim
// context with a page (another user), the session's primary context, and
// the gate on an httptest server.
type fixture struct {
	t        *testing.T
	admin    *cdpConn // the test's own, ungated connection to Chromium
	victim   string   // the victim's context
	victimT  string   // the victim's page
	primary  string
	cfg      Config
	srv      *httptest.Server
	logs     *testutil.SyncBuffer
	cancel   context.CancelCauseFunc
	results  chan served
	contexts *contextLog
}

type served struct {
	res Result
	err error
}

// contextLog records OnContext and ContextParams calls.
type contextLog struct {
	mu     sync.Mutex
	events []string // "+id", "-id"
	params []map[string]any
}

func (l *contextLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...)
}

const victimPage = `data:text/html,<title>victim</title><script>window.alive = 7</script>`

func newFixture(t *testing.T, tweak func(*Config)) *fixture {
	t.Helper()
	url := browserURL(t)
	f := &fixture{t: t, results: make(chan served, 4), contexts: &contextLog{}, logs: &testutil.SyncBuffer{}}
	f.admin = dialCDP(t, url)
	f.victim = f.newContext()
	f.primary = f.newContext()
	f.victimT = f.newPage(f.victim, victimPage)
	f.cfg = Config{
		Upstream:    url,
		Context:     f.primary,
		MaxContexts: 0,
		OnContext: func(_ context.Context, id string, created bool) error {
			f.contexts.mu.Lock()
			defer f.contexts.mu.Unlock()
			if created {
				f.contexts.events = append(f.contexts.events, "+"+id)
			} else {
				f.contexts.events = append(f.contexts.events, "-"+id)
			}
			return nil
		},
		ContextParams: func(p map[string]any) {
			f.contexts.mu.Lock()
			defer f.contexts.mu.Unlock()
			f.contexts.params = append(f.contexts.params, p)
		},
		Log: zerolog.New(io.MultiWriter(testutil.LogWriter(t), f.logs)).Level(zerolog.DebugLevel),
	}
	if tweak != nil {
		tweak(&f.cfg)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	f.cancel = cancel
	up := websocket.Upgrader{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := Upgrade(&up, w, r, nil)
		if err != nil {
			return
		}
		res, err := Serve(ctx, ws, f.cfg)
		f.results <- served{res, err}
	}))
	t.Cleanup(func() {
		cancel(errors.New("test over"))
		f.srv.Close() // waits for Serve to return
	})
	return f
}

// newContext makes a context upstream, disposed when the test ends.
func (f *fixture) newContext() string {
	f.t.Helper()
	id := must[struct {
		BrowserContextID string `json:"browserContextId"`
	}](f.admin, "", "Target.createBrowserContext", nil).BrowserContextID
	f.t.Cleanup(func() { f.admin.Do("", "Target.disposeBrowserContext", map[string]any{"browserContextId": id}) })
	return id
}

func (f *fixture) newPage(browserContext, url string) string {
	f.t.Helper()
	return must[struct {
		TargetID string `json:"targetId"`
	}](f.admin, "", "Target.createTarget", map[string]any{"url": url, "browserContextId": browserContext}).TargetID
}

// client connects an automation client to the gate.
func (f *fixture) client() *cdpConn {
	f.t.Helper()
	return dialCDP(f.t, "ws"+strings.TrimPrefix(f.srv.URL, "http"))
}

// result waits for a session to end.
func (f *fixture) result() served {
	f.t.Helper()
	select {
	case r := <-f.results:
		return r
	case <-time.After(testutil.Scale(30 * time.Second)):
		f.t.Fatal("Serve did not return")
		return served{}
	}
}

// adminEval evaluates expr in target through a fresh admin session: the
// proof that a page runs (a paused one would not answer).
func (f *fixture) adminEval(target, expr string) any {
	f.t.Helper()
	s := must[struct {
		SessionID string `json:"sessionId"`
	}](f.admin, "", "Target.attachToTarget", map[string]any{"targetId": target, "flatten": true}).SessionID
	defer f.admin.Do("", "Target.detachFromTarget", map[string]any{"sessionId": s})
	return f.admin.evaluate(s, expr)
}

// alive waits until a page's window.alive is want: its script ran, and
// it answers, so it is not paused.
func (f *fixture) alive(target string, want float64) {
	f.t.Helper()
	testutil.Eventually(f.t, 30*time.Second, func() error {
		if got := f.adminEval(target, "window.alive"); got != want {
			return fmt.Errorf("page %s: window.alive = %v, want %v", target, got, want)
		}
		return nil
	})
}

// contextOf is a target's browser context, asked upstream.
func (f *fixture) contextOf(target string) string {
	f.t.Helper()
	return must[struct {
		TargetInfo targetInfo `json:"targetInfo"`
	}](f.admin, "", "Target.getTargetInfo", map[string]any{"targetId": target}).TargetInfo.BrowserContextID
}

// contextsUpstream lists Chromium's contexts.
func (f *fixture) contextsUpstream() []string {
	f.t.Helper()
	return must[struct {
		IDs []string `json:"browserContextIds"`
	}](f.admin, "", "Target.getBrowserContexts", nil).IDs
}

// ownPage creates a page through the gate and attaches to it; it returns
// the target and the session.
func ownPage(t *testing.T, c *cdpConn, url string) (string, string) {
	t.Helper()
	target := must[struct {
		TargetID string `json:"targetId"`
	}](c, "", "Target.createTarget", map[string]any{"url": url}).TargetID
	s := must[struct {
		SessionID string `json:"sessionId"`
	}](c, "", "Target.attachToTarget", map[string]any{"targetId": target, "flatten": true}).SessionID
	return target, s
}

// cdpErr runs a command that must fail and returns its error.
func cdpErr(t *testing.T, c *cdpConn, session, method string, params any) (int, string) {
	t.Helper()
	r := c.raw(session, method, params)
	if r.Error == nil {
		t.Fatalf("%s %v succeeded: %s", method, params, r.Result)
	}
	return r.Error.Code, r.Error.Message
}

func jsonOf(t testing.TB, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
