package sitedata

import (
	"reflect"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// TestPartitionedKeys: every suffix of a top-level host with a dot is a
// candidate site (without the public suffix list), an IP only itself.
func TestPartitionedKeys(t *testing.T) {
	for _, tc := range []struct {
		name          string
		origins, tops []string
		want          []string
	}{
		{"ip", []string{"http://localhost:81"}, []string{"http://127.0.0.1:80"},
			[]string{"http://localhost:81/^31", "http://localhost:81/^0http://127.0.0.1"}},
		{"domains", []string{"https://b.com"}, []string{"https://x.a.co.uk"},
			[]string{"https://b.com/^31", "https://b.com/^0https://a.co.uk", "https://b.com/^0https://co.uk", "https://b.com/^0https://x.a.co.uk"}},
		{"no tops", []string{"https://b.com"}, nil, []string{"https://b.com/^31"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := partitionedKeys(tc.origins, tc.tops); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCookieRoundTrip: a cookie converted to the protocol's and back is
// the same; a session cookie stays one.
func TestCookieRoundTrip(t *testing.T) {
	for _, c := range []browser.Cookie{
		{Name: "a", Value: "1", Domain: "x.test", Path: "/p", HTTPOnly: true, Secure: true, SameSite: "Lax",
			Expires: time.Unix(1900000000, 500000000)},
		{Name: "s", Value: "2", Domain: "x.test", Path: "/"},
	} {
		p := ToCDP(c)
		back := FromCDP(&network.Cookie{Name: p.Name, Value: p.Value, Domain: p.Domain, Path: p.Path,
			HTTPOnly: p.HTTPOnly, Secure: p.Secure, SameSite: p.SameSite, Expires: float64(p.Expires), Session: p.Expires == 0})
		if !reflect.DeepEqual(back, c) {
			t.Errorf("round trip of %+v: %+v", c, back)
		}
	}
}

// TestCredentials: a URL with a user name is noted until the next take.
func TestCredentials(t *testing.T) {
	var b Book
	b.add("http://x.test/", true)
	if b.Credentials() {
		t.Fatal("credentials without any")
	}
	b.add("http://u:p@x.test/", true)
	if !b.Credentials() {
		t.Fatal("credentials not noted")
	}
	if origins, _ := b.take(); !reflect.DeepEqual(origins, []string{"http://x.test"}) || b.Credentials() {
		t.Fatalf("take: %v, credentials %v", origins, b.Credentials())
	}
}
