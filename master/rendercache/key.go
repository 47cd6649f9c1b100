package rendercache

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// DefaultIgnoreParams are the query parameters that never change what a
// page shows (tracking tags), removed from the canonical URL.
var DefaultIgnoreParams = []string{"utm_*", "gclid", "fbclid"}

// sigVersion starts every signature's encoding: changing what goes into a
// signature changes it, so old entries are simply never hit again (and
// the sweep removes them as unused). Version 2 keys every render by its
// user (version 1 did only for login pools).
const sigVersion = "cloudbrowser-render-sig/2"

// ErrBadURL is wrapped by Key and CanonicalURL for a URL they cannot use.
var ErrBadURL = errors.New("url")

// CanonicalURL is raw in the form every request for the same page shares
// (the document's "lowest common denominator" of the URL): scheme and
// host lower-cased, the scheme's default port dropped, an empty path "/",
// no fragment, query parameters sorted by name then value (repeated ones
// kept) and the ones matching an ignore pattern (path.Match globs,
// compared case-insensitively) removed.
func CanonicalURL(raw string, ignore []string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadURL, err)
	}
	if u.Scheme == "" || u.Host == "" || u.Opaque != "" {
		return "", fmt.Errorf("%w: %q is not an absolute URL with a host", ErrBadURL, raw)
	}
	u.Scheme = strings.ToLower(u.Scheme)
	host := strings.ToLower(u.Hostname())
	port := u.Port()
	if (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443") {
		port = ""
	}
	if strings.Contains(host, ":") { // IPv6 literal
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	u.Host = host
	u.Fragment, u.RawFragment = "", ""
	if u.Path == "" {
		u.Path, u.RawPath = "/", ""
	}
	u.RawQuery = canonicalQuery(u.RawQuery, ignore)
	u.ForceQuery = false
	return u.String(), nil
}

type param struct {
	name, value string
	eq          bool // "a=" and "a" stay different: a server may tell them apart
}

func canonicalQuery(raw string, ignore []string) string {
	var ps []param
	for _, piece := range strings.Split(raw, "&") {
		if piece == "" {
			continue
		}
		n, v, eq := strings.Cut(piece, "=")
		p := param{name: unescape(n), value: unescape(v), eq: eq}
		if ignored(p.name, ignore) {
			continue
		}
		ps = append(ps, p)
	}
	slices.SortStableFunc(ps, func(a, b param) int {
		if c := strings.Compare(a.name, b.name); c != 0 {
			return c
		}
		return strings.Compare(a.value, b.value)
	})
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(url.QueryEscape(p.name))
		if p.eq || p.value != "" {
			b.WriteByte('=')
			b.WriteString(url.QueryEscape(p.value))
		}
	}
	return b.String()
}

// unescape decodes a query component; one that does not decode is kept
// as written (it still identifies the page, just less canonically).
func unescape(s string) string {
	if d, err := url.QueryUnescape(s); err == nil {
		return d
	}
	return s
}

func ignored(name string, patterns []string) bool {
	name = strings.ToLower(name)
	for _, p := range patterns {
		if ok, _ := path.Match(strings.ToLower(p), name); ok {
			return true
		}
	}
	return false
}

// Key returns the signature of a render spec and its canonical URL.
//
// The signature is the hex SHA-256 of a versioned, length-prefixed
// encoding of the parameters that change the rendered bytes: canonical
// URL, format ("" = png), width, height, full page, JPEG quality (only for
// jpeg: other formats ignore it), wait selector, wait for network idle,
// wait delay, app, whether the app's pool logs its browsers in
// (pooledLogin), and the user: every principal has a partition of its own,
// so a result (logged in or not) is never served to another principal, and
// whether a page is cached says nothing about what others rendered.
// Options that do not change the bytes (timeout, max age, no-cache,
// ignore-robots) are left out, so requests differing only in them share
// one entry. The master calls it only through jobs.Admit (jobs.CacheKey),
// with a validated spec whose defaults are filled in.
func (c *Cache) Key(spec wire.JobSpec, pooledLogin bool) (sig, canonicalURL string, err error) {
	return Key(spec, pooledLogin, c.cfg.IgnoreParams)
}

// Key is Cache.Key with explicit ignore patterns.
func Key(spec wire.JobSpec, pooledLogin bool, ignore []string) (sig, canonicalURL string, err error) {
	canonicalURL, err = CanonicalURL(spec.URL, ignore)
	if err != nil {
		return "", "", err
	}
	format := strings.ToLower(spec.Format)
	if format == "" {
		format = wire.FormatPNG
	}
	quality := spec.Quality
	if format != wire.FormatJPEG {
		quality = 0
	}
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	field := func(s string) {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
		h.Write([]byte(s))
	}
	for _, f := range []string{
		sigVersion,
		canonicalURL,
		format,
		strconv.Itoa(spec.Width),
		strconv.Itoa(spec.Height),
		strconv.FormatBool(spec.FullPage),
		strconv.Itoa(quality),
		spec.WaitSelector,
		strconv.FormatBool(spec.WaitNetworkIdle),
		strconv.FormatInt(spec.WaitDelayMs, 10),
		spec.App,
		strconv.FormatBool(pooledLogin),
		spec.User,
	} {
		field(f)
	}
	return hex.EncodeToString(h.Sum(nil)), canonicalURL, nil
}

// isSig reports whether s has the form of a signature (for Purge).
func isSig(s string) bool {
	if len(s) != sha256.Size*2 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}
