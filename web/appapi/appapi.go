// Package appapi holds the in-page app API script (window.cloudbrowser)
// that workers inject into their virtual browsers.
package appapi

import (
	_ "embed"
	"encoding/json"
	"strings"
)

//go:embed appapi.js
var source string

// Config is what one browser's copy of the API knows about itself.
type Config struct {
	Binding    string `json:"binding"` // name of the page->worker binding
	Origin     string `json:"origin"`  // the app's origin; elsewhere nothing is installed
	Token      string `json:"token"`   // authenticates this browser's requests
	User       string `json:"user"`
	AppName    string `json:"appName"`
	MountPoint string `json:"mountPoint"`
	InstanceID string `json:"instanceId"`
	BrowserID  string `json:"browserId"`
	BrowserURL string `json:"browserURL"`
}

// Script returns the API script for one browser.
func Script(c Config) string {
	b, _ := json.Marshal(c) // plain strings: cannot fail
	return strings.Replace(source, "__CB_CONFIG__", string(b), 1)
}
