// Package web holds the pages and scripts CloudBrowser serves to people:
// the client engine, embedded in the binary so no build step is needed.
package web

import (
	"embed"
	"html/template"
	"io/fs"
	"strings"

	"github.com/cloudbrowser-go/cloudbrowser/internal/assets"
	"github.com/cloudbrowser-go/cloudbrowser/internal/httpsec"
)

//go:embed static
var files embed.FS

// Static is the client engine's assets (engine.js, engine.css), served by
// workers under /<app>/a/<instanceId>/_cb/.
var Static, _ = fs.Sub(files, "static")

// Assets serves Static with validators and compression (internal/assets);
// pages name their files with Assets.URL so browsers keep them. The .html
// files are templates the processes render, not files to hand out.
var Assets = mustAssets()

func mustAssets() *assets.Set {
	s, err := assets.New(Static, func(name string) bool { return !strings.HasSuffix(name, ".html") })
	if err != nil {
		panic(err) // embedded files: only a broken build gets here
	}
	return s
}

// The pages' inline scripts and styles are allowed by hash in the
// Content-Security-Policy (internal/httpsec).
func init() {
	_ = fs.WalkDir(files, "static", func(path string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".html") {
			b, _ := files.ReadFile(path)
			httpsec.AllowInline(string(b))
		}
		return nil
	})
}

// Engine is the Browser URL's bootstrap page. It names its assets with
// {{asset "engine.js"}}: the versioned URL, cached by browsers until the
// binary serves other bytes.
var Engine = template.Must(template.New("engine.html").
	Funcs(template.FuncMap{"asset": Assets.URL}).ParseFS(files, "static/engine.html"))

// Landing is the landing page of multiInstance and singleBrowserPerUser
// applications: a plain page, not a virtual browser (a Chromium context per
// landing page would cost ~25 MB for a list of links).
var Landing = template.Must(template.ParseFS(files, "static/landing.html"))

// LandingData fills Landing. With InstanceID set it is an instance's page.
type LandingData struct {
	AppName, Description, MountPoint      string
	CSRF                                  string
	Instances                             []LandingInstance
	InstanceID, InstanceURL, InstanceName string
	Browsers                              []LandingBrowser
	// Owner: the viewer owns the instance and may share it.
	Owner  bool
	Grants []Grant
	// Notice is shown at the top (e.g. the user's browser was released).
	Notice string
}

// Grant is one permission shown on the instance page.
type Grant struct{ Principal, Role string }

// LandingInstance is one of the user's instances, or one shared with them
// (then Owner is its owner and Role the user's role).
type LandingInstance struct {
	ID, URL, Worker, Created, Name string
	Owner, Role                    string
	// Share: the viewer owns it and shares it from this page
	// (singleBrowserPerUser, whose instance URL opens a browser).
	Share  bool
	Grants []Grant
}

// LandingBrowser is one browser of an instance.
type LandingBrowser struct {
	ID, URL, Owner, Created, Name string
	Clients                       int
	Mine                          bool
	Role                          string // the viewer's role
	Grants                        []Grant
}

// Login is an application's login page.
var Login = template.Must(template.ParseFS(files, "static/login.html"))

// LoginData fills Login.
type LoginData struct {
	AppName, MountPoint, CSRF, Next, Error, User string
}

// Admin is the dashboard page (its script and style are in Static/admin).
var Admin, _ = files.ReadFile("static/admin/index.html")

// AdminLogin asks for the admin token.
var AdminLogin = template.Must(template.ParseFS(files, "static/admin/login.html"))

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
	// SocketURL, when set, is where the engine opens its socket instead
	// (ws(s)://host/<Socket>), with Ticket in Sec-WebSocket-Protocol.
	SocketURL, Ticket string
	// Notice is shown above the screen (e.g. the user's previous browser
	// was released for being idle).
	Notice string
}
