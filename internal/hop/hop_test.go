package hop

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
)

func TestSignVerify(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	other := []byte("fedcba9876543210fedcba9876543210")
	now := time.Unix(1_700_000_000, 0)
	f := Fields{Method: "POST", Host: "cb.example", URI: "/secure/login?next=%2Fsecure", ForwardedFor: "203.0.113.7", Proto: "https"}
	good := Sign(key, now, f)
	with := func(mod func(*Fields)) Fields { g := f; mod(&g); return g }
	for _, tc := range []struct {
		name   string
		key    []byte
		at     time.Time
		value  string
		fields Fields
		want   error
	}{
		{"valid", key, now, good, f, nil},
		{"valid at the edge of the window", key, now.Add(Window), good, f, nil},
		{"valid with the signer's clock ahead", key, now.Add(-Window), good, f, nil},
		{"wrong key", other, now, good, f, ErrBadMAC},
		{"no key", nil, now, good, f, ErrNoKey},
		{"stale", key, now.Add(Window + time.Second), good, f, ErrStale},
		{"from the future", key, now.Add(-Window - time.Second), good, f, ErrStale},
		{"missing", key, now, "", f, ErrMissing},
		{"tampered path", key, now, good, with(func(g *Fields) { g.URI = "/other/login" }), ErrBadMAC},
		{"tampered query", key, now, good, with(func(g *Fields) { g.URI = "/secure/login?next=%2Fx" }), ErrBadMAC},
		{"tampered forwarded-for", key, now, good, with(func(g *Fields) { g.ForwardedFor = "198.51.100.1" }), ErrBadMAC},
		{"appended forwarded-for", key, now, good, with(func(g *Fields) { g.ForwardedFor = "198.51.100.1, 203.0.113.7" }), ErrBadMAC},
		{"tampered proto", key, now, good, with(func(g *Fields) { g.Proto = "http" }), ErrBadMAC},
		{"tampered method", key, now, good, with(func(g *Fields) { g.Method = "GET" }), ErrBadMAC},
		{"tampered host", key, now, good, with(func(g *Fields) { g.Host = "evil.example" }), ErrBadMAC},
		{"field shifted between parts", key, now, Sign(key, now, Fields{Method: "POST", Host: "cb.example\n/secure"}), Fields{Method: "POST", Host: "cb.example", URI: "/secure"}, ErrBadMAC},
		{"other version", key, now, "v2" + strings.TrimPrefix(good, "v1"), f, ErrMalformed},
		{"timestamp not a number", key, now, "v1.x." + strings.SplitN(good, ".", 3)[2], f, ErrMalformed},
		{"short mac", key, now, good[:len(good)-4], f, ErrMalformed},
		{"garbage", key, now, "hello", f, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := Verify(tc.key, tc.at, tc.value, tc.fields); !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestFieldsOf: the worker reads the request line and forwarded headers as
// received, several header lines joined the way a proxy would not send them
// (so an added line breaks the signature).
func TestFieldsOf(t *testing.T) {
	r := httptest.NewRequest("GET", "http://cb.example/a/b?x=1", nil)
	r.Header.Add("X-Forwarded-For", "203.0.113.7")
	r.Header.Add("X-Forwarded-For", "198.51.100.1")
	r.Header.Set("X-Forwarded-Proto", "http")
	got := FieldsOf(r)
	want := Fields{Method: "GET", Host: "cb.example", URI: "http://cb.example/a/b?x=1", ForwardedFor: "203.0.113.7, 198.51.100.1", Proto: "http"}
	if got != want {
		t.Fatalf("FieldsOf = %+v, want %+v", got, want)
	}
}

func TestKey(t *testing.T) {
	var k Key
	if k.Get() != nil {
		t.Fatal("zero Key holds a key")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if b := k.Wait(ctx); b != nil {
		t.Fatalf("Wait without a key = %q", b)
	}
	got := make(chan []byte)
	go func() { got <- k.Wait(context.Background()) }()
	k.Set([]byte("abc"))
	if b := <-got; string(b) != "abc" {
		t.Fatalf("Wait = %q", b)
	}
	k.Set(nil) // ignored
	if string(k.Get()) != "abc" {
		t.Fatalf("Get = %q", k.Get())
	}
	k.Set([]byte("def"))
	if b := k.Wait(context.Background()); string(b) != "def" {
		t.Fatalf("Wait after a new key = %q", b)
	}
}

// TestWireFormat: the value is v1.<unix seconds>.<base64url HMAC-SHA256 of
// the fields, one a line>, computed here without the package's code:
// proxies and workers of other builds must keep agreeing.
func TestWireFormat(t *testing.T) {
	key := bytes.Repeat([]byte{7}, KeyLen)
	f := Fields{Method: "GET", Host: "cb.example", URI: "/notes/a/x?y=1", ForwardedFor: "203.0.113.7, 10.0.0.1", Proto: "https"}
	now := time.Unix(1_700_000_123, 0)
	m := hmac.New(sha256.New, key)
	m.Write([]byte("v1\n1700000123\nGET\ncb.example\n/notes/a/x?y=1\n203.0.113.7, 10.0.0.1\nhttps\n"))
	want := "v1.1700000123." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	if got := Sign(key, now, f); got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
	if got := AppendSign([]byte("X-CB-Hop: "), key, now, f); string(got) != "X-CB-Hop: "+want {
		t.Fatalf("AppendSign = %s", got)
	}
}

// TestAppendSignAllocations: a proxy signs every relayed request, so
// signing into a head with room allocates nothing.
func TestAppendSignAllocations(t *testing.T) {
	if testutil.Race {
		t.Skip("-race: sync.Pool drops states at random")
	}
	key := bytes.Repeat([]byte{7}, KeyLen)
	f := Fields{Method: "GET", Host: "cb.example", URI: "/notes/a/w-abc.defghijklmno/b/bqwertyuiop1/r", ForwardedFor: "203.0.113.7", Proto: "http"}
	buf := make([]byte, 0, 256)
	now := time.Now()
	AppendSign(buf, key, now, f) // the first use keys an HMAC state
	if n := testing.AllocsPerRun(200, func() { buf = AppendSign(buf[:0], key, now, f) }); n != 0 {
		t.Fatalf("AppendSign allocates %v times per call, want 0", n)
	}
}

// BenchmarkSignVerify: the cost one relayed request pays, both sides.
func BenchmarkSignVerify(b *testing.B) {
	key := []byte("0123456789abcdef0123456789abcdef")
	f := Fields{Method: "GET", Host: "cb.example", URI: "/notes/a/w-abc.defghijklmno/b/bqwertyuiop1/_cb/engine.js", ForwardedFor: "203.0.113.7", Proto: "http"}
	now := time.Now()
	for b.Loop() {
		if err := Verify(key, now, Sign(key, now, f), f); err != nil {
			b.Fatal(err)
		}
	}
}

// HMAC states are reused per key: signing with two keys in turn, from
// several goroutines, must give each key's own signature every time.
func TestReusedStatesNeverMixKeys(t *testing.T) {
	keys := [][]byte{bytes.Repeat([]byte{1}, KeyLen), bytes.Repeat([]byte{2}, KeyLen)}
	f := Fields{Method: "GET", Host: "h", URI: "/x", ForwardedFor: "1.2.3.4", Proto: "http"}
	now := time.Unix(1_700_000_000, 0)
	want := []string{Sign(keys[0], now, f), Sign(keys[1], now, f)}
	if want[0] == want[1] {
		t.Fatal("two keys, one signature")
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				k := (g + i) % 2
				if got := Sign(keys[k], now, f); got != want[k] {
					errs <- fmt.Sprintf("key %d: %s, want %s", k, got, want[k])
					return
				}
				if err := Verify(keys[k], now, want[k], f); err != nil {
					errs <- fmt.Sprintf("verify with key %d: %v", k, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
