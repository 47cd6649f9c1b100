package policy

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestShortURL(t *testing.T) {
	if u := "https://example.com/"; ShortURL(u) != u {
		t.Errorf("a short URL changed: %q", ShortURL(u))
	}
	long := "https://example.com/" + strings.Repeat("é", 200)
	got := ShortURL(long)
	if !strings.HasSuffix(got, "…") || !utf8.ValidString(got) || len(got) > maxLoggedURL+len("…") {
		t.Errorf("ShortURL(long) = %q", got)
	}
}

func TestIsBlockedError(t *testing.T) {
	if !IsBlockedError("net::ERR_BLOCKED_BY_CLIENT") || IsBlockedError("net::ERR_NAME_NOT_RESOLVED") {
		t.Error("IsBlockedError")
	}
}
