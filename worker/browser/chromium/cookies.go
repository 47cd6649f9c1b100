package chromium

import (
	"context"
	"errors"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/storage"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium/sitedata"
)

// Cookies implements browser.Browser. Storage commands go to the browser
// session with this browser's context id: the page session would only see
// cookies for the page's URL.
func (b *cbrowser) Cookies(ctx context.Context) ([]browser.Cookie, error) {
	cctx, cancel, err := b.call(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	res, err := cdp.Call(cctx, b.bc, storage.GetCookies, storage.GetCookiesParams{BrowserContextID: b.contextID})
	if err != nil {
		return nil, b.fail("get cookies", err)
	}
	out := make([]browser.Cookie, 0, len(res.Cookies))
	for _, c := range res.Cookies {
		out = append(out, sitedata.FromCDP(c))
	}
	return out, nil
}

// SetCookies implements browser.Browser.
func (b *cbrowser) SetCookies(ctx context.Context, cookies []browser.Cookie) error {
	params := make([]*network.CookieParam, 0, len(cookies))
	for _, c := range cookies {
		if c.Name == "" || c.Domain == "" {
			return errors.New("chromium: set cookies: every cookie needs a name and a domain")
		}
		params = append(params, sitedata.ToCDP(c))
	}
	if len(params) == 0 {
		return nil
	}
	cctx, cancel, err := b.call(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if _, err := cdp.Call(cctx, b.bc, storage.SetCookies, storage.SetCookiesParams{Cookies: params, BrowserContextID: b.contextID}); err != nil {
		return b.fail("set cookies", err)
	}
	return nil
}
