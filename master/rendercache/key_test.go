package rendercache

import (
	"errors"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

func TestCanonicalURL(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		ignore         []string // nil = defaults
	}{
		{"lower-cases scheme and host", "HTTP://Example.COM/Path", "http://example.com/Path", nil},
		{"drops http default port", "http://example.com:80/a", "http://example.com/a", nil},
		{"drops https default port", "https://example.com:443/a", "https://example.com/a", nil},
		{"keeps other ports", "http://example.com:8080/a", "http://example.com:8080/a", nil},
		{"keeps 443 on http", "http://example.com:443/", "http://example.com:443/", nil},
		{"empty path is /", "https://example.com", "https://example.com/", nil},
		{"drops fragment", "https://example.com/a#section", "https://example.com/a", nil},
		{"sorts parameters", "https://e.com/?b=2&a=1", "https://e.com/?a=1&b=2", nil},
		{"keeps repeated, sorted by value", "https://e.com/?a=2&a=1&a=2", "https://e.com/?a=1&a=2&a=2", nil},
		{"drops utm_*, gclid, fbclid", "https://e.com/?utm_source=x&q=1&UTM_Medium=y&gclid=z&fbclid=w", "https://e.com/?q=1", nil},
		{"no query left, no ?", "https://e.com/p?utm_source=x", "https://e.com/p", nil},
		{"empty query dropped", "https://e.com/p?", "https://e.com/p", nil},
		{"configured glob", "https://e.com/?sess=1&sessid=2&q=3", "https://e.com/?q=3", []string{"sess*"}},
		{"empty ignore list keeps all", "https://e.com/?utm_source=x", "https://e.com/?utm_source=x", []string{}},
		{"same encoding for equal values", "https://e.com/?q=a%20b", "https://e.com/?q=a+b", nil},
		{"a and a= stay apart", "https://e.com/?a&b=", "https://e.com/?a&b=", nil},
		{"IPv6 default port", "http://[::1]:80/", "http://[::1]/", nil},
		{"path case kept", "https://e.com/CaseMatters", "https://e.com/CaseMatters", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ignore := tc.ignore
			if ignore == nil {
				ignore = DefaultIgnoreParams
			}
			got, err := CanonicalURL(tc.in, ignore)
			if err != nil || got != tc.want {
				t.Fatalf("CanonicalURL(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
	for _, bad := range []string{"", "/relative", "example.com/x", "mailto:a@b.c", "http://%zz"} {
		if _, err := CanonicalURL(bad, nil); !errors.Is(err, ErrBadURL) {
			t.Errorf("CanonicalURL(%q) err = %v, want ErrBadURL", bad, err)
		}
	}
}

func TestKey(t *testing.T) {
	base := wire.JobSpec{Kind: wire.JobRender, URL: "https://example.com/a?x=1&y=2", Format: wire.FormatPNG,
		Width: 1280, Height: 800, User: "alice"}
	type mod func(s *wire.JobSpec)
	for _, tc := range []struct {
		name   string
		mod    mod
		pooled bool // for the modified spec; base is not pooled
		same   bool
	}{
		{"other spelling of the URL", func(s *wire.JobSpec) { s.URL = "HTTPS://EXAMPLE.com:443/a?y=2&utm_source=n&x=1#top" }, false, true},
		{"timeout does not count", func(s *wire.JobSpec) { s.TimeoutMs = 5000 }, false, true},
		{"max age does not count", func(s *wire.JobSpec) { s.MaxAgeMs = 1 }, false, true},
		{"no-cache does not count", func(s *wire.JobSpec) { s.NoCache = true }, false, true},
		{"ignore-robots does not count", func(s *wire.JobSpec) { s.IgnoreRobots = true }, false, true},
		{"user counts without a login pool (each principal has a partition)", func(s *wire.JobSpec) { s.User = "bob" }, false, false},
		{"quality does not count for png", func(s *wire.JobSpec) { s.Quality = 50 }, false, true},
		{"empty format is png", func(s *wire.JobSpec) { s.Format = "" }, false, true},
		{"format case", func(s *wire.JobSpec) { s.Format = "PNG" }, false, true},
		{"path", func(s *wire.JobSpec) { s.URL = "https://example.com/b?x=1&y=2" }, false, false},
		{"query value", func(s *wire.JobSpec) { s.URL = "https://example.com/a?x=2&y=2" }, false, false},
		{"format", func(s *wire.JobSpec) { s.Format = wire.FormatPDF }, false, false},
		{"width", func(s *wire.JobSpec) { s.Width = 1281 }, false, false},
		{"height", func(s *wire.JobSpec) { s.Height = 801 }, false, false},
		{"full page", func(s *wire.JobSpec) { s.FullPage = true }, false, false},
		{"wait selector", func(s *wire.JobSpec) { s.WaitSelector = "#main" }, false, false},
		{"wait network idle", func(s *wire.JobSpec) { s.WaitNetworkIdle = true }, false, false},
		{"wait delay", func(s *wire.JobSpec) { s.WaitDelayMs = 100 }, false, false},
		{"app", func(s *wire.JobSpec) { s.App = "pooldemo" }, false, false},
		{"login pool", func(s *wire.JobSpec) {}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			tc.mod(&s)
			a, _, err := Key(base, false, DefaultIgnoreParams)
			if err != nil {
				t.Fatal(err)
			}
			b, _, err := Key(s, tc.pooled, DefaultIgnoreParams)
			if err != nil {
				t.Fatal(err)
			}
			if (a == b) != tc.same {
				t.Fatalf("same signature = %v, want %v", a == b, tc.same)
			}
			if !isSig(a) {
				t.Fatalf("signature %q is not 64 hex digits", a)
			}
		})
	}

	// A logged-in result is never another user's; JPEG quality counts.
	pooled := base
	pooled.App = "pooldemo"
	bob := pooled
	bob.User = "bob"
	a, _, _ := Key(pooled, true, nil)
	b, _, _ := Key(bob, true, nil)
	if a == b {
		t.Fatal("two users of a login pool share a signature")
	}
	j1, j2 := base, base
	j1.Format, j2.Format = wire.FormatJPEG, wire.FormatJPEG
	j2.Quality = 50
	a, _, _ = Key(j1, false, nil)
	b, _, _ = Key(j2, false, nil)
	if a == b {
		t.Fatal("JPEG quality does not change the signature")
	}
	// Fields cannot run into each other (length-prefixed encoding).
	s1, s2 := base, base
	s1.WaitSelector, s1.App = "ab", "c"
	s2.WaitSelector, s2.App = "a", "bc"
	a, _, _ = Key(s1, false, nil)
	b, _, _ = Key(s2, false, nil)
	if a == b {
		t.Fatal("ambiguous encoding: shifted fields share a signature")
	}
	if _, _, err := Key(wire.JobSpec{URL: "not a url"}, false, nil); !errors.Is(err, ErrBadURL) {
		t.Fatalf("bad URL: err = %v", err)
	}
}
