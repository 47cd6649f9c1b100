package browser

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
)

func TestNullBrowserLifecycle(t *testing.T) {
	ctx := context.Background()
	var rt Null
	b, err := rt.NewBrowser(ctx, Options{URL: "http://example.test/"})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Page().URL; got != "http://example.test/" {
		t.Fatalf("url %q", got)
	}
	if w, h := b.(*nullBrowser).size(); w != DefaultWidth || h != DefaultHeight {
		t.Fatalf("size %dx%d", w, h)
	}
	if st, _ := rt.Stats(ctx); st.Browsers != 1 {
		t.Fatalf("stats %+v", st)
	}
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal("second close:", err)
	}
	<-b.Done()
	if !errors.Is(b.Err(), ErrClosed) {
		t.Fatalf("err %v", b.Err())
	}
	if err := b.Navigate(ctx, "http://x.test/"); !errors.Is(err, ErrClosed) {
		t.Fatalf("navigate after close: %v", err)
	}
	if st, _ := rt.Stats(ctx); st.Browsers != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestNullCloseClosesBrowsers(t *testing.T) {
	ctx := context.Background()
	var rt Null
	b, err := rt.NewBrowser(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b.Page().URL != "about:blank" {
		t.Fatalf("url %q", b.Page().URL)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Done():
	default:
		t.Fatal("browser still open after runtime close")
	}
	if _, err := rt.NewBrowser(ctx, Options{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("new after close: %v", err)
	}
}

func TestNullPageChangesAndHistory(t *testing.T) {
	ctx := context.Background()
	var rt Null
	defer rt.Close()
	b, _ := rt.NewBrowser(ctx, Options{URL: "http://a.test/"})
	var seen []string
	stop := b.OnPageChange(func(p Page) { seen = append(seen, p.URL) })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(b.Navigate(ctx, "http://b.test/"))
	must(b.Input(ctx, InputEvent{Type: InputNavigate, URL: "http://c.test/"}))
	must(b.Input(ctx, InputEvent{Type: InputBack}))
	must(b.Input(ctx, InputEvent{Type: InputBack}))
	must(b.Input(ctx, InputEvent{Type: InputBack})) // nothing further back
	must(b.Input(ctx, InputEvent{Type: InputForward}))
	must(b.Input(ctx, InputEvent{Type: InputReload}))
	stop()
	must(b.Navigate(ctx, "http://d.test/"))
	want := []string{"http://b.test/", "http://c.test/", "http://b.test/", "http://a.test/", "http://b.test/"}
	if len(seen) != len(want) {
		t.Fatalf("seen %q, want %q", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("seen %q, want %q", seen, want)
		}
	}
	must(b.Input(ctx, InputEvent{Type: InputResize, Width: 640, Height: 480}))
	if w, h := b.(*nullBrowser).size(); w != 640 || h != 480 {
		t.Fatalf("size %dx%d", w, h)
	}
	must(b.Input(ctx, InputEvent{Type: InputKeyDown, Key: "a"}))
	must(b.Input(ctx, InputEvent{Type: InputWheel, DeltaY: 10}))
}

func TestNullScreencast(t *testing.T) {
	var rt Null
	defer rt.Close()
	b, _ := rt.NewBrowser(context.Background(), Options{})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- b.Screencast(ctx, ScreencastOptions{}, func(Frame) { t.Error("null runtime produced a frame") })
	}()
	// A second screencast is refused while the first runs. Probe with a
	// cancelled context so a probe that wins the race returns at once.
	done, stop := context.WithCancel(context.Background())
	stop()
	testutil.Eventually(t, 10*time.Second, func() error {
		select {
		case err := <-errc:
			// A probe held the screencast when the first one asked for it.
			if !errors.Is(err, ErrBusy) {
				t.Fatalf("first screencast: %v", err)
			}
			go func() {
				errc <- b.Screencast(ctx, ScreencastOptions{}, func(Frame) { t.Error("null runtime produced a frame") })
			}()
			return errors.New("the first screencast lost the race to a probe; asked again")
		default:
		}
		err := b.Screencast(done, ScreencastOptions{}, func(Frame) {})
		if errors.Is(err, ErrBusy) {
			return nil
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		return errors.New("the first screencast has not started")
	})
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("screencast: %v", err)
	}
	// Closing the browser ends a screencast.
	go func() { errc <- b.Screencast(context.Background(), ScreencastOptions{}, func(Frame) {}) }()
	_ = b.Close(context.Background())
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("screencast after close: %v", err)
	}
}

func TestNullCookiesAndEvaluate(t *testing.T) {
	ctx := context.Background()
	var rt Null
	defer rt.Close()
	b, _ := rt.NewBrowser(ctx, Options{})
	exp := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := b.SetCookies(ctx, []Cookie{{Name: "a", Value: "1", Domain: "x.test", Path: "/", Expires: exp}, {Name: "b", Value: "2", Domain: "x.test", Path: "/"}}); err != nil {
		t.Fatal(err)
	}
	if err := b.SetCookies(ctx, []Cookie{{Name: "a", Value: "3", Domain: "x.test", Path: "/"}}); err != nil {
		t.Fatal(err)
	}
	cs, err := b.Cookies(ctx)
	if err != nil || len(cs) != 2 || cs[0].Value != "3" || cs[1].Value != "2" {
		t.Fatalf("cookies %+v %v", cs, err)
	}
	if err := b.SetCookies(ctx, []Cookie{{Value: "x"}}); err == nil {
		t.Fatal("nameless cookie accepted")
	}
	if err := b.Evaluate(ctx, "1+1", nil); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("evaluate: %v", err)
	}
}

func TestInputValidate(t *testing.T) {
	ok := []InputEvent{
		{Type: InputMouseMove, X: 1, Y: 2},
		{Type: InputMouseDown, X: 1, Y: 2, Button: ButtonLeft, ClickCount: 1, Buttons: 1},
		{Type: InputMouseUp, Button: ButtonRight},
		{Type: InputWheel, DeltaY: 100},
		{Type: InputKeyDown, Key: "Enter"},
		{Type: InputKeyUp, Code: "KeyA"},
		{Type: InputRawKeyDown, KeyCode: 8},
		{Type: InputChar, Text: "x"},
		{Type: InputInsertText, Text: "pasted"},
		{Type: InputResize, Width: 800, Height: 600},
		{Type: InputResize, Width: 390, Height: 844, Scale: 3, Mobile: true},
		{Type: InputCompose, Text: "にほんご"},
		{Type: InputCompose}, // cancels
		{Type: InputTouch, Phase: TouchStart, Touches: []TouchPoint{{X: 1, Y: 2}}},
		{Type: InputTouch, Phase: TouchMove, Touches: []TouchPoint{{X: 1, Y: 2}, {X: 3, Y: 4, ID: 1}}},
		{Type: InputTouch, Phase: TouchEnd},
		{Type: InputTouch, Phase: TouchCancel},
		{Type: InputBack}, {Type: InputForward}, {Type: InputReload},
		{Type: InputNavigate, URL: "https://example.com/a?b"},
		{Type: InputNavigate, URL: "data:text/html,hi"},
		{Type: InputNavigate, URL: "about:blank"},
	}
	for _, ev := range ok {
		if err := ev.Validate(); err != nil {
			t.Errorf("%+v: %v", ev, err)
		}
	}
	bad := []InputEvent{
		{},
		{Type: "teleport"},
		{Type: InputMouseDown, Button: "thumb"},
		{Type: InputMouseMove, Modifiers: 99},
		{Type: InputKeyDown},
		{Type: InputChar},
		{Type: InputInsertText},
		{Type: InputResize, Width: 0, Height: 10},
		{Type: InputResize, Width: 100000, Height: 10},
		{Type: InputResize, Width: 10, Height: 10, Scale: 5},
		{Type: InputResize, Width: 10, Height: 10, Scale: -1},
		{Type: InputCompose, Text: strings.Repeat("x", MaxComposition+1)},
		{Type: InputTouch},
		{Type: InputTouch, Phase: "poke", Touches: []TouchPoint{{}}},
		{Type: InputTouch, Phase: TouchStart},
		{Type: InputTouch, Phase: TouchMove, Touches: []TouchPoint{{ID: 1}, {ID: 1}}},
		{Type: InputTouch, Phase: TouchMove, Touches: make([]TouchPoint, MaxTouches+1)},
		{Type: InputTouch, Phase: TouchStart, Touches: []TouchPoint{{X: math.NaN()}}},
		{Type: InputNavigate},
		{Type: InputNavigate, URL: "file:///etc/passwd"},
		{Type: InputNavigate, URL: "javascript:alert(1)"},
		{Type: InputNavigate, URL: "chrome://settings"},
		{Type: InputNavigate, URL: "about:config"},
		{Type: InputNavigate, URL: "http:///nohost"},
	}
	for _, ev := range bad {
		if err := ev.Validate(); !errors.Is(err, ErrInvalidInput) {
			t.Errorf("%+v: got %v, want ErrInvalidInput", ev, err)
		}
	}
	var rt Null
	defer rt.Close()
	b, _ := rt.NewBrowser(context.Background(), Options{})
	if err := b.Input(context.Background(), InputEvent{Type: "teleport"}); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("null input: %v", err)
	}
}

func TestInputEventJSON(t *testing.T) {
	var ev InputEvent
	if err := json.Unmarshal([]byte(`{"type":"wheel","x":5,"y":6,"deltaX":0,"deltaY":-120}`), &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Type != InputWheel || ev.X != 5 || ev.DeltaY != -120 {
		t.Fatalf("%+v", ev)
	}
}

func TestCheckURL(t *testing.T) {
	deny := func(string) bool { return false }
	for _, u := range []string{"data:text/html,x", "DATA:x", "blob:http://a.test/1", "about:blank", "About:srcdoc"} {
		if ok, _ := CheckURL(deny, u); !ok {
			t.Errorf("%s denied", u)
		}
	}
	if ok, _ := CheckURL(nil, "http://a.test/"); !ok {
		t.Error("nil policy denied")
	}
	if ok, _ := CheckURL(deny, "http://a.test/"); ok {
		t.Error("deny policy allowed")
	}
	ok, p := CheckURL(func(string) bool { panic("boom") }, "http://a.test/")
	if ok || p != "boom" {
		t.Errorf("panicking policy: %v %v", ok, p)
	}
}

func TestNullPolicy(t *testing.T) {
	ctx := context.Background()
	var rt Null
	allow := func(u string) bool { return u != "http://denied.test/" }
	if _, err := rt.NewBrowser(ctx, Options{URL: "http://denied.test/", Allow: allow}); !errors.Is(err, ErrBlocked) {
		t.Fatalf("denied initial URL: %v", err)
	}
	b, err := rt.NewBrowser(ctx, Options{Allow: allow})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	if err := b.Navigate(ctx, "http://denied.test/"); !errors.Is(err, ErrBlocked) {
		t.Fatalf("navigate: %v", err)
	}
	if err := b.Input(ctx, InputEvent{Type: InputNavigate, URL: "http://denied.test/"}); !errors.Is(err, ErrBlocked) {
		t.Fatalf("input navigate: %v", err)
	}
	if err := b.Navigate(ctx, "http://ok.test/"); err != nil {
		t.Fatal(err)
	}
	if got := b.Page().URL; got != "http://ok.test/" {
		t.Fatalf("url %q", got)
	}
	if n := b.Blocked(); n != 0 {
		t.Fatalf("blocked %d", n)
	}
}
