// Package engineclient is what the benchmark drivers share of a client
// engine: opening an app as a new user (cookie jar, redirects to a Browser
// URL) and its WebSocket.
package engineclient

import (
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// Open opens /<app> at public as a new user and returns the Browser URL's
// path it was sent to and the user's cookies.
func Open(public, app string) (string, []*http.Cookie, error) {
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 60 * time.Second}
	resp, err := c.Get(public + "/" + app)
	if err != nil {
		return "", nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return "", nil, fmt.Errorf("GET /%s: %s", app, resp.Status)
	}
	path := resp.Request.URL.Path
	if !strings.Contains(path, "/b/") {
		return "", nil, fmt.Errorf("did not reach a Browser URL: %s", path)
	}
	pu, err := url.Parse(public)
	if err != nil {
		return "", nil, err
	}
	return path, jar.Cookies(pu), nil
}

// Dial opens the client engine's socket of the Browser URL path at host
// with the user's cookies (and extra headers, e.g. a hop signature).
func Dial(host, path string, cookies []*http.Cookie, extra http.Header) (*websocket.Conn, error) {
	h := http.Header{"Origin": {"http://" + host}}
	for _, ck := range cookies {
		h.Add("Cookie", ck.String())
	}
	for k, v := range extra {
		h[k] = v
	}
	conn, _, err := websocket.DefaultDialer.Dial("ws://"+host+path+"/ws", h)
	return conn, err
}
