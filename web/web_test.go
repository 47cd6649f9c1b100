package web

import (
	"bytes"
	"strings"
	"testing"
)

// TestEngineInlinesAssets: the engine page carries engine.css and engine.js
// itself, so a new user's client engine starts without two more requests.
func TestEngineInlinesAssets(t *testing.T) {
	var buf bytes.Buffer
	if err := Engine.Execute(&buf, EngineData{App: "notes", AppName: "Notes", InstanceID: "w-a.b", BrowserID: "c",
		Base: "/notes/a/w-a.b", Socket: "/notes/a/w-a.b/b/c/ws"}); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	css, _ := files.ReadFile("static/engine.css")
	// html/template drops the script's comments; its code stays.
	if !strings.Contains(page, "window.cloudbrowserEngine = {") || !strings.Contains(page, string(css)) {
		t.Fatal("engine.js or engine.css not inlined")
	}
	if strings.Contains(page, "_cb/engine.") {
		t.Fatal("the page still loads an engine asset")
	}
	if !strings.Contains(page, `data-socket="/notes/a/w-a.b/b/c/ws"`) {
		t.Fatal("template data missing")
	}
}
