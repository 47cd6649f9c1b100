package main

import "testing"

func TestPublicURLHost(t *testing.T) {
	for _, tc := range []struct{ listen, bound, want string }{
		{":8080", "", "127.0.0.1:8080"},
		{"", "0.0.0.0:8080", "127.0.0.1:8080"},
		{"", "[::]:8080", "127.0.0.1:8080"},
		{"", "127.0.0.1:18181", "127.0.0.1:18181"},
		{"cb.example:80", "", "cb.example:80"},
	} {
		if got := publicURLHost(tc.listen, tc.bound); got != tc.want {
			t.Errorf("publicURLHost(%q, %q) = %q, want %q", tc.listen, tc.bound, got, tc.want)
		}
	}
}
