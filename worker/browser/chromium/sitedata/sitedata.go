// Package sitedata is what sites keep in a Chromium browser context: its
// cookies, converted to and from the protocol's (a browser's Cookies and
// SetCookies, for TTL replacements and snapshots), and the clearing of all
// of it, so that a browser a job used can be lent to the next job (Reset;
// docs/jobs.md, "Browser reuse"). It sees Chromium only through cdp
// sessions.
package sitedata

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/cdproto/storage"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// ErrNotResettable is the refusal to reset a browser that was given more
// than a job gives it (bindings, an installed script), or whose pages used
// URL credentials (user:password@, kept in an HTTP auth cache no command
// clears): only a new browser is blank then.
var ErrNotResettable = errors.New("chromium: browser cannot be reset")

// FromCDP converts a protocol cookie.
func FromCDP(c *network.Cookie) browser.Cookie {
	out := browser.Cookie{
		Name: c.Name, Value: c.Value, Domain: c.Domain, Path: c.Path,
		HTTPOnly: c.HTTPOnly, Secure: c.Secure, SameSite: string(c.SameSite),
	}
	if !c.Session && c.Expires > 0 {
		sec, frac := math.Modf(c.Expires)
		out.Expires = time.Unix(int64(sec), int64(frac*1e9))
	}
	return out
}

// ToCDP converts a cookie to set.
func ToCDP(c browser.Cookie) *network.CookieParam {
	p := &network.CookieParam{
		Name: c.Name, Value: c.Value, Domain: c.Domain, Path: c.Path,
		HTTPOnly: c.HTTPOnly, Secure: c.Secure,
	}
	switch c.SameSite {
	case "Strict", "Lax", "None":
		p.SameSite = network.CookieSameSite(c.SameSite)
	}
	if p.Path == "" {
		p.Path = "/"
	}
	// Expires is set only for persistent cookies; leaving it out keeps a
	// session cookie a session cookie.
	if !c.Expires.IsZero() {
		p.Expires = cdp.TimeSinceEpoch(float64(c.Expires.UnixNano()) / 1e9)
	}
	return p
}

// Book collects the origins the browser's documents had since the
// last Reset: every frame's commit the page's session reports, so that
// Reset clears the storage of each (Chromium has no command that clears
// one browser context's storage for all origins at once).
type Book struct {
	mu sync.Mutex
	// origins of every document and worker; tops of the top-level
	// documents (pages and popups), whose sites partition the storage of
	// third-party frames.
	origins, tops map[string]struct{}
	// credentials: a URL carried a user name or password. Chromium keeps
	// them in the context's HTTP auth cache, which no command clears.
	credentials bool
	// listenErr: the target events could not be followed (Listen).
	listenErr error
}

// SeePage records the origin of a frame the page's session saw commit (the
// page's own frames); it runs on the event reader, so it only records.
func (o *Book) SeePage(ev any) {
	nav, ok := ev.(*page.EventFrameNavigated)
	if !ok || nav.Frame == nil {
		return
	}
	top := nav.Frame.ParentID == ""
	o.add(nav.Frame.SecurityOrigin, top)
	o.add(nav.Frame.URL, top)
}

// Listen has the book see the target events of ctx's Chromium (a chromedp
// context) for browser context id; if it cannot, Reset refuses.
func (o *Book) Listen(ctx context.Context, id cdp.BrowserContextID) {
	err := chromedp.ListenBrowser(ctx, func(ev any) { o.SeeTarget(id, ev) })
	o.mu.Lock()
	defer o.mu.Unlock()
	o.listenErr = err
}

// SeeTarget records the origin of a target of the browser context (a
// cross-site frame, a worker, a popup) the browser session announces:
// chromedp keeps target discovery on, so every target's creation and
// every change of its URL comes by, also of targets gone by the reset.
func (o *Book) SeeTarget(ctxID cdp.BrowserContextID, ev any) {
	var ti *target.Info
	switch ev := ev.(type) {
	case *target.EventTargetCreated:
		ti = ev.TargetInfo
	case *target.EventTargetInfoChanged:
		ti = ev.TargetInfo
	}
	if ti != nil && ti.BrowserContextID == ctxID {
		o.add(ti.URL, ti.Type == "page")
	}
}

// add records u's origin if it has one that can hold data (http(s)).
func (o *Book) add(u string, top bool) {
	origin, creds := originOf(u)
	if origin == "" {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.credentials = o.credentials || creds
	if o.origins == nil {
		o.origins, o.tops = map[string]struct{}{}, map[string]struct{}{}
	}
	o.origins[origin] = struct{}{}
	if top {
		o.tops[origin] = struct{}{}
	}
}

// Credentials reports whether a URL since the last take carried
// credentials.
func (o *Book) Credentials() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.credentials
}

// take returns the recorded origins and the storage keys their data may
// be under when partitioned, and forgets them.
func (o *Book) take() (origins, keys []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.credentials = false
	for s := range o.origins {
		origins = append(origins, s)
	}
	slices.Sort(origins)
	keys = partitionedKeys(origins, slices.Sorted(maps.Keys(o.tops)))
	o.origins, o.tops = nil, nil
	return origins, keys
}

// partitionedKeys are the storage keys (Chromium's serialization, as
// Storage.getStorageKey gives them: "<origin>/^0<top-level site>", and
// "<origin>/^31" for a same-site frame below a cross-site one) that
// origins' data may have in frames below tops. The top-level site is the
// registrable domain, which needs the public suffix list: every suffix of
// the host is tried instead (a key that does not exist costs a call).
func partitionedKeys(origins, tops []string) []string {
	var sites []string
	for _, t := range tops {
		u, err := url.Parse(t)
		if err != nil {
			continue
		}
		host := u.Hostname()
		sites = append(sites, u.Scheme+"://"+host)
		if net.ParseIP(host) != nil {
			continue
		}
		for i := strings.IndexByte(host, '.'); i >= 0 && strings.Contains(host[i+1:], "."); i = strings.IndexByte(host, '.') {
			host = host[i+1:]
			sites = append(sites, u.Scheme+"://"+host)
		}
	}
	slices.Sort(sites)
	sites = slices.Compact(sites)
	var keys []string
	for _, o := range origins {
		keys = append(keys, o+"/^31")
		for _, s := range sites {
			keys = append(keys, o+"/^0"+s)
		}
	}
	return keys
}

// originOf is the scheme://host[:port] of an http(s) URL ("" otherwise:
// opaque, about:, data: documents have no storage of their own), and
// whether the URL carries credentials.
func originOf(raw string) (origin string, credentials bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", false
	}
	return u.Scheme + "://" + u.Host, u.User != nil
}

// Tab is the browser context Reset clears, as its browser sees it.
type Tab struct {
	// Page is the session of its one page, Browser the browser session.
	Page, Browser cdp.Session
	Target        target.ID
	Context       cdp.BrowserContextID
	// Navigate loads a URL in the page and waits until it commits.
	Navigate func(ctx context.Context, url string) error
	// Retry runs a page command again while the page moves between
	// renderers (nil: once).
	Retry func(ctx context.Context, fn func() error) error
}

// retrying is a page session whose calls go through Tab.Retry.
type retrying struct {
	cdp.Session
	retry func(ctx context.Context, fn func() error) error
}

func (r retrying) Call(ctx context.Context, method string, params, res any) error {
	return r.retry(ctx, func() error { return r.Session.Call(ctx, method, params, res) })
}

// Reset clears what the pages of tab's browser context left since the last
// Reset, as book recorded it: it closes every other page of the context
// (popups), loads about:blank, resets the tab's history and window name,
// clears the context's cookies, HTTP cache and permissions, and every
// storage (local and session storage, IndexedDB, Cache Storage, service
// workers, …) of each origin its documents and workers had, under their
// partitioned keys too. An error means the context is not known to be
// blank.
func Reset(ctx context.Context, tab Tab, book *Book) error {
	book.mu.Lock()
	listenErr := book.listenErr
	book.mu.Unlock()
	if listenErr != nil {
		return fmt.Errorf("target events: %w", listenErr)
	}
	if tab.Retry != nil {
		tab.Page = retrying{tab.Page, tab.Retry}
	}
	// Storage keys of the frames shown now: a third-party frame's key is
	// partitioned by the top-level site, which clearing by origin does not
	// reach.
	keys, err := frameKeys(ctx, tab, book)
	if err != nil {
		return err
	}
	// Popups, and the origins of every frame and worker of the context.
	targets, err := cdp.Call(ctx, tab.Browser, target.GetTargets, target.GetTargetsParams{})
	if err != nil {
		return fmt.Errorf("targets: %w", err)
	}
	for _, ti := range targets.TargetInfos {
		if ti.BrowserContextID != tab.Context || ti.TargetID == tab.Target {
			continue
		}
		book.add(ti.URL, ti.Type == "page")
		if ti.Type == "page" {
			if err := CloseTarget(ctx, tab.Browser, ti.TargetID); err != nil {
				return fmt.Errorf("close a popup: %w", err)
			}
		}
	}
	if err := tab.Navigate(ctx, "about:blank"); err != nil {
		return fmt.Errorf("about:blank: %w", err)
	}
	// What the tab keeps across documents: its history (a page could go
	// back to the previous job's) and its window name.
	if _, err := cdp.Call(ctx, tab.Page, page.ResetNavigationHistory, cdp.Empty{}); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	if _, err := cdp.Call(ctx, tab.Page, runtime.Evaluate, runtime.EvaluateParams{Expression: `window.name = ""`}); err != nil {
		return fmt.Errorf("window name: %w", err)
	}
	if _, err := cdp.Call(ctx, tab.Browser, storage.ClearCookies, storage.ClearCookiesParams{BrowserContextID: tab.Context}); err != nil {
		return fmt.Errorf("cookies: %w", err)
	}
	// The page's session clears its own browser context's cache.
	if _, err := cdp.Call(ctx, tab.Page, network.ClearBrowserCache, cdp.Empty{}); err != nil {
		return fmt.Errorf("HTTP cache: %w", err)
	}
	if _, err := cdp.Call(ctx, tab.Browser, cdpbrowser.ResetPermissions, cdpbrowser.ResetPermissionsParams{BrowserContextID: tab.Context}); err != nil {
		return fmt.Errorf("permissions: %w", err)
	}
	for _, k := range keys {
		if _, err := cdp.Call(ctx, tab.Page, storage.ClearDataForStorageKey, storage.ClearDataForStorageKeyParams{StorageKey: k, StorageTypes: "all"}); err != nil {
			return fmt.Errorf("storage of %s: %w", k, err)
		}
	}
	origins, guessed := book.take()
	for _, o := range origins {
		if _, err := cdp.Call(ctx, tab.Page, storage.ClearDataForOrigin, storage.ClearDataForOriginParams{Origin: o, StorageTypes: "all"}); err != nil {
			return fmt.Errorf("storage of %s: %w", o, err)
		}
	}
	for _, k := range guessed {
		// A guessed key Chromium does not know is no error; one it
		// cannot parse is refused, which is as good.
		_, _ = cdp.Call(ctx, tab.Page, storage.ClearDataForStorageKey, storage.ClearDataForStorageKeyParams{StorageKey: k, StorageTypes: "all"})
	}
	return nil
}

// CloseTarget closes a target (a popup here, the initial tab of a new
// Chromium for the runtime) and waits until Chromium no longer lists it (it
// answers CloseTarget first).
func CloseTarget(ctx context.Context, s cdp.Session, id target.ID) error {
	if _, err := cdp.Call(ctx, s, target.CloseTarget, target.CloseTargetParams{TargetID: id}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		res, err := cdp.Call(ctx, s, target.GetTargets, target.GetTargetsParams{})
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(res.TargetInfos, func(ti *target.Info) bool { return ti.TargetID == id }) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// frameKeys returns the storage keys of the page's frames, and records
// their origins.
func frameKeys(ctx context.Context, tab Tab, book *Book) ([]string, error) {
	tree, err := cdp.Call(ctx, tab.Page, page.GetFrameTree, cdp.Empty{})
	if err != nil {
		return nil, fmt.Errorf("frame tree: %w", err)
	}
	var keys []string
	var walk func(t *page.FrameTree) error
	walk = func(t *page.FrameTree) error {
		if t == nil || t.Frame == nil {
			return nil
		}
		top := t.Frame.ParentID == ""
		book.add(t.Frame.SecurityOrigin, top)
		book.add(t.Frame.URL, top)
		if o, _ := originOf(t.Frame.SecurityOrigin); o != "" {
			res, err := cdp.Call(ctx, tab.Page, storage.GetStorageKey, storage.GetStorageKeyParams{FrameID: t.Frame.ID})
			if err != nil {
				return fmt.Errorf("storage key: %w", err)
			}
			if res.StorageKey != "" {
				keys = append(keys, string(res.StorageKey))
			}
		}
		for _, c := range t.ChildFrames {
			if err := walk(c); err != nil {
				return err
			}
		}
		return nil
	}
	return keys, walk(tree.FrameTree)
}
