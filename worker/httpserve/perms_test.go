package httpserve

import "testing"

// TestParseRole: the share forms grant reader and reader-writer, and none
// revokes; ownership is never granted.
func TestParseRole(t *testing.T) {
	for _, s := range []string{"reader", "reader-writer", "none"} {
		if _, err := ParseRole(s); err != nil {
			t.Error(err)
		}
	}
	if _, err := ParseRole("owner"); err == nil {
		t.Error("owner must not be grantable")
	}
}
