// Package web holds the pages and scripts CloudBrowser serves to people:
// the client engine, embedded in the binary so no build step is needed.
package web

import (
	"embed"
	"html/template"
	"io/fs"
)

//go:embed static
var files embed.FS

// Static is the client engine's assets (engine.js, engine.css), served by
// workers under /<app>/a/<instanceId>/_cb/.
var Static, _ = fs.Sub(files, "static")

// Engine is the Browser URL's bootstrap page.
var Engine = template.Must(template.ParseFS(files, "static/engine.html"))

// EngineData fills Engine.
type EngineData struct {
	App, AppName string
	InstanceID   string
	BrowserID    string
	Worker       string
	// Base is "/<app>/a/<instanceId>", the prefix of every engine request.
	Base string
	// Socket is the WebSocket path.
	Socket string
}
