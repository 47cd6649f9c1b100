// Package bundle reads application bundles: a folder (or fs.FS) with an
// app.json manifest and the app's files.
package bundle

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/egress"
	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"

	"github.com/cloudbrowser-go/cloudbrowser/internal/sequence"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// ManifestName is the manifest file at the root of a bundle.
const ManifestName = "app.json"

// Manifest is the app.json of a bundle. docs/bundles.md has its JSON
// Schema.
type Manifest struct {
	Name        string `json:"name"`
	MountPoint  string `json:"mountPoint"`
	Description string `json:"description,omitempty"`
	Entry       string `json:"entry"`
	Strategy    string `json:"strategy,omitempty"`
	Public      *bool  `json:"public,omitempty"`
	// Authentication requires a login (applications issue: accounts).
	Authentication bool `json:"authentication,omitempty"`
	// BrowserLimit caps virtual browsers per user and per instance (0 = no cap).
	BrowserLimit BrowserLimit `json:"browserLimit,omitzero"`
	// Viewport is the initial size of the virtual browsers (0 = 1280x800).
	Viewport Viewport `json:"viewport,omitzero"`
	// Navigation restricts the URLs the virtual browsers may load.
	Navigation Navigation `json:"navigation,omitzero"`
	// Egress opts destinations back in that the egress guard refuses by
	// default (loopback, private ranges, ...); see docs/bundles.md.
	Egress Egress `json:"egress,omitzero"`
	// Files says what crosses the browsers' door as files (uploads for
	// the pages' file pickers, downloads); see docs/client-engine.md.
	Files Files `json:"files,omitzero"`
	// IdleTimeout: a virtual browser with no connected client this long is
	// released (given back to its pool). Absent: DefaultIdleTimeout; "0"
	// keeps browsers until they are closed.
	IdleTimeout *sequence.Duration `json:"idleTimeout,omitempty"`
	// Pool configures an application-specific browser pool (pools issue);
	// see ParsePool.
	Pool json.RawMessage `json:"pool,omitempty"`
}

// Files are an app's file transfers: both on by default, within
// DefaultFilesMB per browser.
type Files struct {
	NoUploads   bool `json:"noUploads,omitempty"`
	NoDownloads bool `json:"noDownloads,omitempty"`
	// MaxMB bounds one browser's uploads and downloads together, in MiB
	// (0 = DefaultFilesMB, at most MaxFilesMB).
	MaxMB int `json:"maxMB,omitempty"`
}

// Per-browser file limits, in MiB.
const (
	DefaultFilesMB = 100
	MaxFilesMB     = 10 << 10
)

// FilesBytes is an app's per-browser limit for files in bytes.
func (f Files) FilesBytes() int64 {
	if f.MaxMB <= 0 {
		return DefaultFilesMB << 20
	}
	return int64(f.MaxMB) << 20
}

// DefaultIdleTimeout releases a browser nobody watched for this long when
// the manifest says nothing (leased browsers must come back).
const DefaultIdleTimeout = 10 * time.Minute

// MinIdleTimeout bounds idleTimeout from below (0 excepted): a browser
// must survive a page reload.
const MinIdleTimeout = time.Second

// Idle returns the manifest's idle timeout (0: never released).
func (m *Manifest) Idle() time.Duration {
	if m.IdleTimeout == nil {
		return DefaultIdleTimeout
	}
	return m.IdleTimeout.D()
}

// BrowserLimit caps browsers.
type BrowserLimit struct {
	PerUser     int `json:"perUser,omitempty"`
	PerInstance int `json:"perInstance,omitempty"`
}

// Viewport is a size in CSS pixels.
type Viewport struct {
	Width  int `json:"width,omitempty"`
	Height int `json:"height,omitempty"`
}

// Navigation holds URL patterns: a URL is allowed if it matches an Allow
// pattern (or Allow is empty) and no Deny pattern. Patterns are globs, e.g.
// "https://*.example.com/*": * matches any run of characters, except that
// in the scheme and host part it does not cross a "/".
type Navigation struct {
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
	// ClientNavigate lets users open addresses of their choice from the
	// client engine (a navigate input); off by default, when only the
	// app's own pages decide where its browsers go.
	ClientNavigate bool `json:"clientNavigate,omitempty"`
}

// Egress lists egress guard rules (internal/egress.ParseRule): addresses,
// prefixes or host names, each with an optional port. Metadata addresses
// and the cluster's own endpoints cannot be allowed by an app.
type Egress struct {
	Allow []string `json:"allow,omitempty"`
}

// FieldError is one problem, naming the manifest field ("pool.init[2]").
type FieldError = sequence.FieldError

// Errors is every problem found in one manifest.
type Errors []FieldError

func (es Errors) Error() string { return "invalid manifest: " + sequence.Errors(es).Error() }

var mountRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// Reserved reports whether a mount point is taken by the cluster itself:
// the paths proxies keep for the cluster, and the workers' login pages.
func Reserved(mount string) bool {
	switch strings.ToLower(mount) {
	case "login", "logout":
		return true
	}
	return urlkind.Reserved(mount)
}

var strategies = map[string]bool{
	wire.SingleAppInstance: true, wire.SingleInstancePerUser: true,
	wire.SingleBrowserPerUser: true, wire.MultiInstance: true,
}

// Validate checks a manifest; files lists the bundle's files (for a
// relative entry), nil to skip that check.
func (m *Manifest) Validate(files map[string]bool) error {
	var es Errors
	add := func(field, format string, args ...any) {
		es = append(es, FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if strings.TrimSpace(m.Name) == "" {
		add("name", "is required")
	} else if len(m.Name) > 100 {
		add("name", "is longer than 100 characters")
	}
	switch {
	case m.MountPoint == "":
		add("mountPoint", "is required")
	case !mountRe.MatchString(m.MountPoint):
		add("mountPoint", "%q must be 1-64 lowercase letters, digits, '-' or '_', starting with a letter or digit", m.MountPoint)
	case Reserved(m.MountPoint):
		add("mountPoint", "%q is reserved by the cluster", m.MountPoint)
	}
	if m.Strategy == "" {
		m.Strategy = wire.SingleAppInstance
	} else if !strategies[m.Strategy] {
		add("strategy", "%q is not one of singleAppInstance, singleInstancePerUser, singleBrowserPerUser, multiInstance", m.Strategy)
	}
	switch e := m.Entry; {
	case e == "":
		add("entry", "is required (a bundle file such as index.html, or an http(s) URL)")
	case strings.HasPrefix(e, "http://") || strings.HasPrefix(e, "https://"):
	case strings.Contains(e, "://"):
		add("entry", "%q: only http and https URLs are allowed", e)
	default:
		clean := path.Clean(strings.TrimPrefix(e, "/"))
		if strings.HasPrefix(clean, "..") {
			add("entry", "%q leaves the bundle", e)
		} else if files != nil && !files[clean] {
			add("entry", "%q is not a file of the bundle", e)
		}
	}
	if len(m.Description) > 500 {
		add("description", "is longer than 500 characters")
	}
	if m.BrowserLimit.PerUser < 0 {
		add("browserLimit.perUser", "must not be negative")
	}
	if m.BrowserLimit.PerInstance < 0 {
		add("browserLimit.perInstance", "must not be negative")
	}
	if m.Files.MaxMB < 0 || m.Files.MaxMB > MaxFilesMB {
		add("files.maxMB", "%d is outside 0..%d", m.Files.MaxMB, MaxFilesMB)
	}
	if d := m.IdleTimeout; d != nil && (*d < 0 || (*d > 0 && d.D() < MinIdleTimeout)) {
		add("idleTimeout", "%s must be at least %s (0 keeps browsers until closed)", d.D(), MinIdleTimeout)
	}
	for _, v := range []struct {
		field string
		n     int
	}{{"viewport.width", m.Viewport.Width}, {"viewport.height", m.Viewport.Height}} {
		if v.n != 0 && (v.n < 100 || v.n > 8192) {
			add(v.field, "%d is outside 100..8192", v.n)
		}
	}
	for _, l := range []struct {
		field string
		pats  []string
	}{{"navigation.allow", m.Navigation.Allow}, {"navigation.deny", m.Navigation.Deny}} {
		for i, p := range l.pats {
			if _, err := CompilePattern(p); err != nil {
				add(fmt.Sprintf("%s[%d]", l.field, i), "%v", err)
			}
		}
	}
	for i, r := range m.Egress.Allow {
		if _, err := egress.ParseRule(r); err != nil {
			add(fmt.Sprintf("egress.allow[%d]", i), "%v", err)
		}
	}
	if len(m.Pool) > 0 {
		if _, err := ParsePool(m.Pool); err != nil {
			var pes sequence.Errors
			if errors.As(err, &pes) {
				es = append(es, pes...)
			} else {
				add("pool", "%v", err)
			}
		}
	}
	if len(es) > 0 {
		return es
	}
	return nil
}

// ParsePool decodes and validates the manifest's "pool" object (nil if
// absent). Errors name fields under "pool.".
func ParsePool(raw json.RawMessage) (*PoolConfig, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var c PoolConfig
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("not a pool configuration: %w", err)
	}
	if err := c.Validate("pool"); err != nil {
		return nil, err
	}
	return &c, nil
}

// CompilePattern turns a navigation glob into a regular expression.
func CompilePattern(p string) (*regexp.Regexp, error) {
	if p == "" {
		return nil, fmt.Errorf("empty pattern")
	}
	if len(p) > 500 {
		return nil, fmt.Errorf("pattern longer than 500 characters")
	}
	// In the scheme and host, * does not cross a "/" (so a query string
	// cannot fake the host); in the path it matches anything.
	origin, rest := p, ""
	if i := strings.Index(p, "://"); i >= 0 {
		if j := strings.Index(p[i+3:], "/"); j >= 0 {
			origin, rest = p[:i+3+j], p[i+3+j:]
		}
	}
	glob := func(s, star string) string {
		parts := strings.Split(s, "*")
		for i := range parts {
			parts[i] = regexp.QuoteMeta(parts[i])
		}
		return strings.Join(parts, star)
	}
	return regexp.Compile("^" + glob(origin, "[^/]*") + glob(rest, ".*") + "$")
}

// App returns the cluster's view of the manifest.
func (m *Manifest) App() wire.App {
	public := m.Public == nil || *m.Public
	return wire.App{
		Name: m.Name, MountPoint: m.MountPoint, Description: m.Description,
		Strategy: m.Strategy, Entry: m.Entry, Public: public, Authentication: m.Authentication,
		ViewportWidth: m.Viewport.Width, ViewportHeight: m.Viewport.Height,
		BrowsersPerUser: m.BrowserLimit.PerUser, BrowsersPerInstance: m.BrowserLimit.PerInstance,
	}
}

// App returns the cluster's view of the bundle, files included.
func (b *Bundle) App() wire.App {
	a := b.Manifest.App()
	a.Files = b.Files
	a.Manifest = b.Files[ManifestName]
	return a
}

// Bundle is a loaded, validated bundle.
type Bundle struct {
	Manifest Manifest
	Files    map[string][]byte // slash paths relative to the bundle root
}

// MaxFileSize bounds one bundle file read by Load.
const MaxFileSize = 16 << 20

// Load reads and validates the bundle rooted at dir of fsys.
func Load(fsys fs.FS, dir string) (*Bundle, error) {
	raw, err := fs.ReadFile(fsys, path.Join(dir, ManifestName))
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", dir, err)
	}
	m, err := ParseManifest(raw)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", dir, err)
	}
	b := &Bundle{Files: map[string][]byte{}}
	err = fs.WalkDir(fsys, dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		src := p // the file whose bytes are packed
		if d.Type()&fs.ModeSymlink != 0 {
			// Links are not packed as links (the master refuses them): the
			// target's bytes are, if the target is a file of the bundle.
			if src, err = resolveLink(fsys, dir, p); err != nil {
				return err
			}
		} else if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		info, err := fs.Stat(fsys, src)
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		if info.Size() > MaxFileSize {
			return fmt.Errorf("%s: %d bytes is over the %d byte limit", p, info.Size(), MaxFileSize)
		}
		data, err := fs.ReadFile(fsys, src)
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p, dir), "/")
		b.Files[rel] = data
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", dir, err)
	}
	names := make(map[string]bool, len(b.Files))
	for n := range b.Files {
		names[n] = true
	}
	if err := m.Validate(names); err != nil {
		return nil, fmt.Errorf("bundle %s: %w", dir, err)
	}
	b.Manifest = *m
	return b, nil
}

// resolveLink follows the symbolic link p (and any chain of links) inside
// fsys and returns the file it ends at, which must lie inside dir.
func resolveLink(fsys fs.FS, dir, p string) (string, error) {
	cur := p
	for range 40 {
		target, err := fs.ReadLink(fsys, cur)
		if err != nil {
			return "", fmt.Errorf("%s: %w", p, err)
		}
		if path.IsAbs(target) {
			return "", fmt.Errorf("%s: symbolic link to %q, outside the bundle directory (absolute)", p, target)
		}
		next := path.Join(path.Dir(cur), target)
		if !inside(dir, next) {
			return "", fmt.Errorf("%s: symbolic link to %q, outside the bundle directory", p, target)
		}
		info, err := fs.Lstat(fsys, next)
		if err != nil {
			return "", fmt.Errorf("%s: symbolic link to %q: %w", p, target, err)
		}
		if info.Mode()&fs.ModeSymlink == 0 {
			if info.IsDir() {
				return "", fmt.Errorf("%s: symbolic link to the directory %q; only links to files are followed", p, target)
			}
			return next, nil
		}
		cur = next
	}
	return "", fmt.Errorf("%s: too many levels of symbolic links", p)
}

// inside reports whether the clean slash path p lies under dir.
func inside(dir, p string) bool {
	if dir == "." {
		return p != ".." && !strings.HasPrefix(p, "../")
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// ParseManifest decodes app.json strictly: unknown fields are errors, so a
// typo does not silently lose a setting.
func ParseManifest(raw []byte) (*Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: %w", ManifestName, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: trailing data after the JSON object", ManifestName)
	}
	return &m, nil
}

// LoadAll loads every bundle in the immediate subfolders of root. Mount point
// collisions are errors.
func LoadAll(fsys fs.FS, root string) ([]*Bundle, error) {
	ents, err := fs.ReadDir(fsys, root)
	if err != nil {
		return nil, fmt.Errorf("bundles: %w", err)
	}
	var out []*Bundle
	seen := map[string]string{}
	var errs []error
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		dir := path.Join(root, e.Name())
		if _, err := fs.Stat(fsys, path.Join(dir, ManifestName)); err != nil {
			continue // not a bundle (e.g. shared assets)
		}
		b, err := Load(fsys, dir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if other, dup := seen[b.Manifest.MountPoint]; dup {
			errs = append(errs, fmt.Errorf("bundle %s: mountPoint %q is already used by %s", dir, b.Manifest.MountPoint, other))
			continue
		}
		seen[b.Manifest.MountPoint] = dir
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Manifest.MountPoint < out[j].Manifest.MountPoint })
	return out, errors.Join(errs...)
}
