package bundle

import (
	"net"
	"net/url"
	"regexp"
	"strings"
)

// NavigationPolicy turns the manifest's navigation patterns into a URL
// filter (nil when the app sets none). URLs under ownOrigin (the app's
// internal origin) are always allowed. Patterns match the URL in canonical
// form (CanonicalNavURL), never the text as written.
func (m *Manifest) NavigationPolicy(ownOrigin string) func(string) bool {
	if m == nil || len(m.Navigation.Allow)+len(m.Navigation.Deny) == 0 {
		return nil
	}
	compile := func(ps []string) []*regexp.Regexp {
		var out []*regexp.Regexp
		for _, p := range ps {
			if re, err := CompilePattern(p); err == nil {
				out = append(out, re)
			}
		}
		return out
	}
	allow, deny := compile(m.Navigation.Allow), compile(m.Navigation.Deny)
	own := ownOrigin + "/"
	return func(raw string) bool {
		u, ok := CanonicalNavURL(raw)
		if !ok {
			return false
		}
		if strings.HasPrefix(u, own) {
			return true
		}
		for _, re := range deny {
			if re.MatchString(u) {
				return false
			}
		}
		if len(allow) == 0 {
			return true
		}
		for _, re := range allow {
			if re.MatchString(u) {
				return true
			}
		}
		return false
	}
}

// CanonicalNavURL rewrites a URL the way navigation patterns are matched:
// scheme and host lower-case, no userinfo, no trailing dot on the host,
// IPv4-mapped IPv6 hosts as IPv4, default ports dropped. A URL that does
// not parse is refused.
func CanonicalNavURL(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", false
	}
	if u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "ws" && u.Scheme != "wss" {
		return raw, true // data:, blob:, about: are exempt before this
	}
	u.User = nil
	host, port := strings.ToLower(u.Hostname()), u.Port()
	host = strings.TrimSuffix(host, ".")
	if ip := net.ParseIP(host); ip != nil {
		if v4 := ip.To4(); v4 != nil {
			host = v4.String()
		} else {
			host = ip.String()
		}
	}
	if (port == "80" && (u.Scheme == "http" || u.Scheme == "ws")) || (port == "443" && (u.Scheme == "https" || u.Scheme == "wss")) {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	u.Host = host
	return u.String(), true
}
