package chromiumtest

import "testing"

func TestRequired(t *testing.T) {
	tests := []struct {
		ci, require string
		want        bool
	}{
		{"", "", false},
		{"true", "", true},
		{"1", "", true},
		{"yes", "", true},
		{"TRUE", "", true},
		{"false", "", false},
		{"0", "", false},
		{"", "1", true},
		{"false", "1", true},
	}
	for _, tt := range tests {
		t.Setenv("CI", tt.ci)
		t.Setenv("CB_REQUIRE_CHROMIUM", tt.require)
		if got := Required(); got != tt.want {
			t.Errorf("CI=%q CB_REQUIRE_CHROMIUM=%q: Required() = %v, want %v", tt.ci, tt.require, got, tt.want)
		}
	}
}
