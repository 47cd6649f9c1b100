package cdpgate

import (
	"context"
	"errors"
	"testing"
)

// TestRewrites: the checks that change a command's params, without
// Chromium.
func TestRewrites(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		method  string
		params  string
		want    string // the params forwarded; "" when refused
		refused string // the error's message
	}{
		{"download path replaced", Config{DownloadPath: "/srv/dl"}, "Browser.setDownloadBehavior",
			`{"behavior":"allowAndName","downloadPath":"/home/client/dl","eventsEnabled":true}`,
			`{"behavior":"allowAndName","browserContextId":"P","downloadPath":"/srv/dl","eventsEnabled":true}`, ""},
		{"download path set", Config{DownloadPath: "/srv/dl"}, "Browser.setDownloadBehavior",
			`{"behavior":"allow","browserContextId":"P"}`,
			`{"behavior":"allowAndName","browserContextId":"P","downloadPath":"/srv/dl"}`, ""},
		{"client's own context downloads nothing", Config{DownloadPath: "/srv/dl"}, "Browser.setDownloadBehavior",
			`{"behavior":"allow","browserContextId":"C","downloadPath":"/tmp"}`,
			`{"behavior":"deny","browserContextId":"C"}`, ""},
		{"downloads denied without a path", Config{}, "Browser.setDownloadBehavior",
			`{"behavior":"allow","downloadPath":"/etc"}`,
			`{"behavior":"deny","browserContextId":"P"}`, ""},
		{"deny keeps no path", Config{DownloadPath: "/srv/dl"}, "Browser.setDownloadBehavior",
			`{"behavior":"deny","downloadPath":"/etc"}`,
			`{"behavior":"deny","browserContextId":"P"}`, ""},
		{"default refused", Config{DownloadPath: "/srv/dl"}, "Browser.setDownloadBehavior",
			`{"behavior":"default"}`, "", `Browser.setDownloadBehavior: behavior "default" is not allowed by the automation gate`},
		{"other context", Config{}, "Browser.setDownloadBehavior",
			`{"behavior":"deny","browserContextId":"V"}`, "", errNoContext.Message},
		{"empty context id", Config{}, "Storage.getCookies",
			`{"browserContextId":""}`, "", errNoContext.Message},
		{"null context id is none", Config{}, "Storage.getCookies",
			`{"browserContextId":null}`, `{"browserContextId":"P"}`, ""},
		{"permissions in primary", Config{}, "Browser.grantPermissions",
			`{"permissions":["geolocation"]}`, `{"browserContextId":"P","permissions":["geolocation"]}`, ""},
		{"drag without files", Config{}, "Input.dispatchDragEvent",
			`{"type":"dragEnter","x":1,"y":2,"data":{"items":[],"files":[],"dragOperationsMask":1}}`,
			`{"data":{"dragOperationsMask":1,"files":[],"items":[]},"type":"dragEnter","x":1,"y":2}`, ""},
		{"drag with files", Config{}, "Input.dispatchDragEvent",
			`{"type":"drop","x":1,"y":2,"data":{"items":[],"files":["/etc/passwd"],"dragOperationsMask":1}}`, "",
			"Input.dispatchDragEvent: data.files is not allowed by the automation gate"},
		{"drag with odd files", Config{}, "Input.dispatchDragEvent",
			`{"type":"drop","x":1,"y":2,"data":{"files":"/etc/passwd"}}`, "",
			"Input.dispatchDragEvent: data.files is not allowed by the automation gate"},
		{"proxy refused", Config{MaxContexts: 1}, "Target.createBrowserContext",
			`{"proxyServer":""}`, "", "Target.createBrowserContext: proxyServer is not allowed by the automation gate"},
		{"no contexts allowed", Config{}, "Target.createBrowserContext",
			`{}`, "", "Target.createBrowserContext: the automation gate allows 0 contexts at once"},
		{"auto-attach not flat", Config{}, "Target.setAutoAttach",
			`{"autoAttach":true,"waitForDebuggerOnStart":false,"flatten":"yes"}`, "",
			"Target.setAutoAttach: flatten other than true is not allowed by the automation gate"},
		{"window not ours", Config{}, "Browser.setWindowBounds",
			`{"windowId":3,"bounds":{}}`, "", errNoWindow.Message},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Context = "P"
			g := &gate{cfg: tt.cfg, own: newOwned("P")}
			g.own.addContext("C")
			session := ""
			if lookup(browserLevel, tt.method) == nil { // a session method
				session = `,"sessionId":"S"`
				g.own.addSession("S", false)
			}
			c, err := parseCommand([]byte(`{"id":1,"method":"` + tt.method + `","params":` + tt.params + session + `}`))
			if err != nil {
				t.Fatal(err)
			}
			err = decide(context.Background(), g, c)
			var ce *cdpError
			switch {
			case tt.refused != "":
				if !errors.As(err, &ce) || ce.Message != tt.refused {
					t.Fatalf("got %v, want refused with %q", err, tt.refused)
				}
			case err != nil:
				t.Fatalf("refused: %v", err)
			default:
				if got := jsonOf(t, c.params); got != tt.want {
					t.Fatalf("forwards %s, want %s", got, tt.want)
				}
			}
		})
	}
}

// TestParseCommand: what is kept of a valid frame.
func TestParseCommand(t *testing.T) {
	c, err := parseCommand([]byte(`{"id":007,"method":"Page.navigate","sessionId":"S","params":{"url":"x","n":1e400},"extra":1}`))
	if err == nil {
		t.Fatalf("leading zeros are not JSON: %+v", c)
	}
	c, err = parseCommand([]byte(`{"id":-7,"method":"Page.navigate","sessionId":"S","params":{"url":"x","n":1e400},"extra":1,"url":"y"}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.id != "-7" || c.method != "Page.navigate" || c.session != "S" || c.level() != sessionLevel {
		t.Fatalf("%+v", c)
	}
	data, err := encodeCommand(5, c.method, c.session, c.params)
	if err != nil || string(data) != `{"id":5,"method":"Page.navigate","params":{"n":1e400,"url":"x"},"sessionId":"S"}` {
		t.Fatalf("%s %v", data, err)
	}
	// Duplicate keys: the gate forwards the value it checked (the last).
	c, _ = parseCommand([]byte(`{"id":1,"method":"Target.createTarget","params":{"browserContextId":"V","browserContextId":"P"}}`))
	if data, _ := encodeCommand(1, c.method, c.session, c.params); string(data) != `{"id":1,"method":"Target.createTarget","params":{"browserContextId":"P"}}` {
		t.Fatalf("%s", data)
	}
}
