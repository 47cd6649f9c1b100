package chromium

import "github.com/cloudbrowser-go/cloudbrowser/worker/browser"

// DevTools implements browser.DevTools.
func (b *cbrowser) DevTools() (browser.DevToolsEndpoint, bool) {
	if b.p.devtools == "" || b.isDone() {
		return browser.DevToolsEndpoint{}, false
	}
	e := browser.DevToolsEndpoint{URL: b.p.devtools, Context: string(b.contextID), Page: string(b.t.TargetID), Policy: b.filter.Load() != nil}
	if b.egress != nil {
		e.ProxyURL = b.egress.ProxyURL()
	}
	return e, true
}
