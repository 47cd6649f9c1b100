package urlkind

import (
	"strings"
	"testing"
)

const (
	testInstance = "w-test1.abcdefghijkl"
	testBrowser  = "bqwertyuiop1"
)

func TestClassify(t *testing.T) {
	const iid, bid = testInstance, testBrowser
	inst := "/chat/a/" + iid
	brow := inst + "/b/" + bid
	tests := []struct {
		name    string
		method  string
		path    string
		upgrade bool
		want    Target
	}{
		{"home", "GET", "/", false, Target{Kind: KindHome}},
		{"home empty path", "GET", "", false, Target{Kind: KindHome}},
		{"home post still home (handler answers 405)", "POST", "/", false, Target{Kind: KindHome}},
		{"app", "GET", "/chat", false, Target{Kind: KindApp, App: "chat"}},
		{"app trailing slash", "GET", "/chat/", false, Target{Kind: KindApp, App: "chat"}},
		{"app subpath", "GET", "/chat/about", false, Target{Kind: KindApp, App: "chat", Rest: "about"}},
		{"app mixed case and dot", "GET", "/My_App.v2", false, Target{Kind: KindApp, App: "My_App.v2"}},
		{"app upgrade", "GET", "/chat", true, Target{Kind: KindApp, App: "chat"}},
		{"instance", "GET", inst, false, Target{Kind: KindInstance, App: "chat", InstanceID: iid}},
		{"instance trailing slash", "GET", inst + "/", false, Target{Kind: KindInstance, App: "chat", InstanceID: iid}},
		{"instance resource", "GET", inst + "/static/app.js", false, Target{Kind: KindResource, App: "chat", InstanceID: iid, Rest: "static/app.js"}},
		{"instance resource named b-ish", "GET", inst + "/bb", false, Target{Kind: KindResource, App: "chat", InstanceID: iid, Rest: "bb"}},
		{"browser", "GET", brow, false, Target{Kind: KindBrowser, App: "chat", InstanceID: iid, BrowserID: bid}},
		{"browser trailing slash", "GET", brow + "/", false, Target{Kind: KindBrowser, App: "chat", InstanceID: iid, BrowserID: bid}},
		{"browser resource", "POST", brow + "/upload/x.png", false, Target{Kind: KindResource, App: "chat", InstanceID: iid, BrowserID: bid, Rest: "upload/x.png"}},
		{"browser resource encoded", "GET", brow + "/files/a%20b%2Fc.txt", false, Target{Kind: KindResource, App: "chat", InstanceID: iid, BrowserID: bid, Rest: "files/a%20b%2Fc.txt"}},
		{"resource empty segment", "GET", brow + "/x//y", false, Target{Kind: KindResource, App: "chat", InstanceID: iid, BrowserID: bid, Rest: "x//y"}},
		{"ws upgrade", "GET", brow + "/ws", true, Target{Kind: KindWebSocket, App: "chat", InstanceID: iid, BrowserID: bid, Rest: "ws"}},
		{"ws without upgrade is a resource", "GET", brow + "/ws", false, Target{Kind: KindResource, App: "chat", InstanceID: iid, BrowserID: bid, Rest: "ws"}},
		{"ws trailing slash is a resource", "GET", brow + "/ws/", true, Target{Kind: KindResource, App: "chat", InstanceID: iid, BrowserID: bid, Rest: "ws/"}},
		{"upgrade elsewhere under instance", "GET", inst + "/sock", true, Target{Kind: KindResource, App: "chat", InstanceID: iid, Rest: "sock"}},
		{"reserved admin", "GET", "/admin", false, Target{Kind: KindReserved, App: "admin"}},
		{"reserved api subpath", "POST", "/api/v1/apps", false, Target{Kind: KindReserved, App: "api", Rest: "v1/apps"}},
		{"reserved case-insensitive", "GET", "/Metrics", false, Target{Kind: KindReserved, App: "Metrics"}},
		{"reserved _cb", "GET", "/_cb/engine.js", false, Target{Kind: KindReserved, App: "_cb", Rest: "engine.js"}},
		{"reserved favicon", "GET", "/favicon.ico", false, Target{Kind: KindReserved, App: "favicon.ico"}},
		{"reserved upgrade", "GET", "/admin/ws", true, Target{Kind: KindReserved, App: "admin", Rest: "ws"}},
		{"reserved json (CDP discovery)", "GET", "/json/version", false, Target{Kind: KindReserved, App: "json", Rest: "version"}},
		{"reserved cdp (one-step CDP URL)", "GET", "/cdp", true, Target{Kind: KindReserved, App: "cdp"}},
		{"reserved cdp without upgrade", "GET", "/cdp", false, Target{Kind: KindReserved, App: "cdp"}},
		{"reserved cdp case-insensitive", "GET", "/CDP/", true, Target{Kind: KindReserved, App: "CDP"}},
		{"cdp under a browser is its resource", "GET", brow + "/cdp", true, Target{Kind: KindResource, App: "chat", InstanceID: iid, BrowserID: bid, Rest: "cdp"}},

		{"a without id", "GET", "/chat/a", false, Target{}},
		{"a slash without id", "GET", "/chat/a/", false, Target{}},
		{"b without id", "GET", inst + "/b", false, Target{}},
		{"b slash without id", "GET", inst + "/b/", false, Target{}},
		{"uppercase instance id", "GET", "/chat/a/W-TEST.X", false, Target{}},
		{"bad instance char", "GET", "/chat/a/w-x_y", false, Target{}},
		{"encoded instance id", "GET", "/chat/a/w-test1%2Eabc", false, Target{}},
		{"bad browser id", "GET", inst + "/b/B!", false, Target{}},
		{"overlong id", "GET", "/chat/a/" + strings.Repeat("x", 101), false, Target{}},
		{"encoded app", "GET", "/ch%61t", false, Target{}},
		{"encoded slash in app", "GET", "/chat%2Fa", false, Target{}},
		{"app starting with dot", "GET", "/.git/config", false, Target{}},
		{"overlong app", "GET", "/" + strings.Repeat("a", 65), false, Target{}},
		{"double slash", "GET", "//chat", false, Target{}},
		{"dot segment", "GET", inst + "/../other/x", false, Target{}},
		{"encoded dot segment", "GET", inst + "/%2e%2E/x", false, Target{}},
		{"single dot segment", "GET", brow + "/./x", false, Target{}},
		{"not absolute", "GET", "chat", false, Target{}},
		{"asterisk", "OPTIONS", "*", false, Target{}},
		{"overlong path", "GET", "/chat/a/" + iid + "/" + strings.Repeat("x", MaxPathLen), false, Target{}},
		{"bad method", "TRACE", "/chat", false, Target{}},
		{"connect", "CONNECT", "/chat", false, Target{}},
		{"lowercase method", "get", "/chat", false, Target{}},
		{"upgrade with POST", "POST", brow + "/ws", true, Target{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Classify(tc.method, tc.path, tc.upgrade)
			if got != tc.want {
				t.Errorf("Classify(%q, %q, %v) = %+v (%v), want %+v (%v)", tc.method, tc.path, tc.upgrade, got, got.Kind, tc.want, tc.want.Kind)
			}
		})
	}
}

func TestKindInstanceKeyed(t *testing.T) {
	for k := KindInvalid; k <= KindReserved; k++ {
		want := k == KindInstance || k == KindBrowser || k == KindResource || k == KindWebSocket
		if k.InstanceKeyed() != want {
			t.Errorf("%v.InstanceKeyed() = %v", k, !want)
		}
		if k.String() == "unknown" {
			t.Errorf("kind %d has no name", k)
		}
	}
	if Kind(99).String() != "unknown" {
		t.Error("out-of-range kind should be unknown")
	}
}

// FuzzClassify checks Classify never panics and keeps its invariants on
// arbitrary input. The seed corpus runs as part of go test.
func FuzzClassify(f *testing.F) {
	for _, s := range []string{"/", "/chat/a/" + testInstance + "/b/" + testBrowser + "/ws", "/%", "/a/a/%2e%2e", "//", "/x/a/./b/"} {
		f.Add("GET", s, true)
	}
	f.Fuzz(func(t *testing.T, method, path string, up bool) {
		got := Classify(method, path, up)
		if got.Kind == KindInvalid && got != (Target{}) {
			t.Fatalf("invalid target carries data: %+v", got)
		}
		if got.Kind.InstanceKeyed() && !strings.Contains(path, "/a/"+got.InstanceID) {
			t.Fatalf("instance %q not in path %q", got.InstanceID, path)
		}
	})
}
