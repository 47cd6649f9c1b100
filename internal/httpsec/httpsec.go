// Package httpsec holds the browser-facing hardening every process applies
// alike: whether a request came over HTTPS (for Secure cookies and HSTS)
// and the security headers of the pages we render ourselves.
package httpsec

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// Scheme says how to tell an HTTPS request: HTTPS ends at the proxies
// themselves (--tls-cert) or at a load balancer in front of them.
type Scheme struct {
	// AlwaysHTTPS: users reach the cluster over HTTPS (--public-url
	// https://…, or the proxies serve TLS).
	AlwaysHTTPS bool
	// TrustForwardedProto: believe X-Forwarded-Proto from any peer
	// (--trust-forwarded-proto) unless TrustedProxies names the peers.
	// Off by default: a client could otherwise claim either.
	TrustForwardedProto bool
	// TrustedProxies: peers whose X-Forwarded-For and X-Forwarded-Proto
	// count (--trusted-proxies); forwarded.go.
	TrustedProxies []netip.Prefix
}

// HTTPS reports whether the user's request came over HTTPS.
func (s Scheme) HTTPS(r *http.Request) bool {
	if s.AlwaysHTTPS || r.TLS != nil {
		return true
	}
	if f, ok := r.Context().Value(frontKey{}).(front); ok {
		return f.https
	}
	return s.believesProto(r) && strings.EqualFold(lastValue(r.Header, "X-Forwarded-Proto"), "https")
}

// Proto is the X-Forwarded-Proto a proxy passes on to the workers.
func (s Scheme) Proto(r *http.Request) string {
	if s.HTTPS(r) {
		return "https"
	}
	return "http"
}

// PublicHTTPS validates a --public-url ("" = not given) and reports whether
// it is an https one.
func PublicHTTPS(raw string) (bool, error) {
	if raw == "" {
		return false, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return false, fmt.Errorf("%q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.User != nil ||
		u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/") {
		return false, fmt.Errorf("%q: want http(s)://host[:port], without path, query or credentials", raw)
	}
	return u.Scheme == "https", nil
}

// hstsValue: one year: browsers remember to use HTTPS only.
const hstsValue = "max-age=31536000"

// SetHSTS sets Strict-Transport-Security on an answer over HTTPS.
func SetHSTS(h http.Header) { h.Set("Strict-Transport-Security", hstsValue) }

var (
	inlineMu sync.Mutex
	scripts  = map[string]bool{}
	styles   = map[string]bool{}
	pageCSP  string // cached; "" = to rebuild
)

var inlineRe = regexp.MustCompile(`(?s)<(script|style)>(.*?)</(?:script|style)>`)

// AllowInline admits the inline <script> and <style> blocks of a page
// (template source) into the pages' policy, by their SHA-256. Blocks must
// not contain template actions: their text must be what is served.
// Packages call it at init for each page they render.
func AllowInline(page string) {
	inlineMu.Lock()
	defer inlineMu.Unlock()
	for _, m := range inlineRe.FindAllStringSubmatch(page, -1) {
		if strings.Contains(m[2], "{{") {
			panic("httpsec: inline " + m[1] + " block with a template action cannot be hashed")
		}
		sum := sha256.Sum256([]byte(m[2]))
		h := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
		if m[1] == "script" {
			scripts[h] = true
		} else {
			styles[h] = true
		}
	}
	pageCSP = ""
}

// PageCSP is the Content-Security-Policy of our own pages (landing, login,
// error, home, dashboard): our scripts and styles only, no framing.
func PageCSP() string {
	inlineMu.Lock()
	defer inlineMu.Unlock()
	if pageCSP == "" {
		pageCSP = "default-src 'self'; script-src 'self'" + joined(scripts) + "; style-src 'self'" + joined(styles) +
			"; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
	}
	return pageCSP
}

func joined(set map[string]bool) string {
	hs := make([]string, 0, len(set))
	for h := range set {
		hs = append(hs, h)
	}
	sort.Strings(hs)
	if len(hs) == 0 {
		return ""
	}
	return " " + strings.Join(hs, " ")
}

// EngineCSP is the client engine page's policy: only same-origin pages may
// frame it (no clickjacking of a user's virtual browser by another site).
const EngineCSP = "frame-ancestors 'self'; base-uri 'none'; object-src 'none'"

// SetPage sets the security headers of one of our pages.
func SetPage(h http.Header, https bool) { set(h, https, PageCSP()) }

// SetEngine sets the security headers of the client engine page.
func SetEngine(h http.Header, https bool) { set(h, https, EngineCSP) }

func set(h http.Header, https bool, csp string) {
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	if https {
		h.Set("Strict-Transport-Security", hstsValue)
	} else {
		h.Del("Strict-Transport-Security")
	}
}

// Pages wraps a handler whose responses are our pages: each gets the page
// headers first (a handler may replace them, like the engine page).
func Pages(s Scheme, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		SetPage(w.Header(), s.HTTPS(r))
		next.ServeHTTP(w, r)
	})
}
