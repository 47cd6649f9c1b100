package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
)

// TestLinkHintSizesTheFirstFrame: a client engine that knows its link is
// slow says so when it connects, and its first frame is a small one
// instead of the browser's last full-size frame (3.5 s on a 256 kbit/s
// link). The link is in fact fast here, so the first acknowledgement
// brings larger frames back without the page changing.
//
// The engine remembers its last measured link for an hour; coming back
// with its assets cached (nothing to measure), a user's Chromium sends the
// remembered estimate, which this test plants.
func TestLinkHintSizesTheFirstFrame(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	c := appsCluster(t)
	users := userBrowsers(t)
	b := open(t, users, "http://"+c.public+"/typing") // a 1000 px wide window
	eventually(t, b, "the first visit shows frames", `Number(document.body.dataset.frames || 0) > 0`, "true")
	eventually(t, b, "full-size frames on a fast link", `Number(document.body.dataset.frameWidth) > 351`, "true")
	browserURL := b.Page().URL

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var ok bool
	if err := b.Evaluate(ctx, `(localStorage.setItem("cb-link", JSON.stringify({kbps: 8, at: Date.now()})), true)`, &ok); err != nil {
		t.Fatal(err)
	}
	// Leave, so the browser's only viewer (whose frames were timed) is
	// gone when the user comes back.
	if err := b.Navigate(ctx, "about:blank"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		if n := c.workerMetric(t, "cloudbrowser_worker_local_clients"); n != 0 {
			return fmt.Errorf("%v clients still connected", n)
		}
		return nil
	})
	if err := b.Navigate(ctx, browserURL); err != nil {
		t.Fatal(err)
	}
	eventually(t, b, "the engine sends the remembered link", `document.body.dataset.link`, "8")
	// 8 kbit/s: the smallest step, 0.35 of the 1000 px window (the
	// worker's CPU grades frames to half size at the least).
	eventually(t, b, "the first frame is small", `Number(document.body.dataset.firstFrameWidth || 0) > 0 && Number(document.body.dataset.firstFrameWidth) <= 351`, "true")
	// The first ack times that frame (the screen's drawing included, so a
	// busy machine may predict a step below full size): larger frames come
	// at once, the page unchanged.
	eventually(t, b, "larger frames after the first ack, the page unchanged", `Number(document.body.dataset.frameWidth) > 351`, "true")
}

// TestLinkHintRejected: a malformed hint is refused before the upgrade,
// with a 400 that names the field.
func TestLinkHintRejected(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	c := appsCluster(t)
	u := newUser(t, "http://"+c.public)
	wsURL := "ws://" + c.public + lastHop(t, u.open("/typing")) + "/ws"
	h := u.socketHeader(wsURL)
	for _, q := range []string{"fast", "0", "-1", "99999999999"} {
		conn, resp, err := websocket.DefaultDialer.DialContext(ctxT(t, 10*time.Second), wsURL+"?link="+q, h)
		if err == nil {
			conn.Close()
			t.Fatalf("link=%s: connected", q)
		}
		if !errors.Is(err, websocket.ErrBadHandshake) || resp == nil {
			t.Fatalf("link=%s: %v", q, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "link: ") || !strings.Contains(string(body), "kbit/s") {
			t.Fatalf("link=%s: %d %s", q, resp.StatusCode, body)
		}
	}
	// A well-formed one connects.
	conn, _, err := websocket.DefaultDialer.DialContext(ctxT(t, 10*time.Second), wsURL+"?link="+strconv.Itoa(2000), h)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
}

// TestPrecastFirstFrame: serving the client engine's page starts the
// browser's screencast, so its first frame is painted before the engine's
// socket opens and is the first thing the socket gets.
func TestPrecastFirstFrame(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	c := appsCluster(t)
	before := c.workerMetric(t, "cloudbrowser_screencast_frames_total")
	u := newUser(t, "http://"+c.public)
	wsURL := "ws://" + c.public + lastHop(t, u.open("/typing")) + "/ws" // the engine page, no socket yet
	testutil.Eventually(t, 30*time.Second, func() error {
		if n := c.workerMetric(t, "cloudbrowser_screencast_frames_total"); n <= before {
			return fmt.Errorf("frames painted %v, before the page %v: no screencast yet", n, before)
		}
		return nil
	})
	conn, _, err := websocket.DefaultDialer.DialContext(ctxT(t, 10*time.Second), wsURL, u.socketHeader(wsURL))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fs := watchFrames(t, conn)
	if _, ok := fs.next(30 * time.Second); !ok {
		t.Fatal("no first frame")
	}
}
