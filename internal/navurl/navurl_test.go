package navurl

import "testing"

func TestCheck(t *testing.T) {
	tests := []struct {
		url string
		ok  bool
	}{
		{"https://example.com/", true},
		{"HTTP://example.com", true},
		{"data:text/html,hi", true},
		{"about:blank", true},
		{"", false},
		{"https:///path", false},
		{"about:config", false},
		{"file:///etc/passwd", false},
		{"javascript:alert(1)", false},
		{"chrome://settings", false},
	}
	for _, tt := range tests {
		if err := Check(tt.url); (err == nil) != tt.ok {
			t.Errorf("Check(%q) = %v, want ok=%v", tt.url, err, tt.ok)
		}
	}
}
