package ids

import (
	"strings"
	"testing"
)

func TestInstanceEncodesWorker(t *testing.T) {
	w := NewWorkerID()
	if !ValidWorker(w) {
		t.Fatalf("generated worker id %q is not valid", w)
	}
	inst := NewInstance(w)
	got, ok := WorkerOf(inst)
	if !ok || got != w {
		t.Fatalf("WorkerOf(%q) = %q, %v; want %q", inst, got, ok, w)
	}
	if !ValidToken(inst) || !ValidToken(NewBrowser()) {
		t.Fatalf("generated ids must be valid tokens")
	}
}

func TestWorkerOf(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		ok   bool
	}{
		{"w-1.abc", "w-1", true},
		{"worker-3.x", "worker-3", true},
		{"noseparator", "", false},
		{".abc", "", false},
		{"w-1.", "", false},
		{"W-1.abc", "", false},
		{"-w.abc", "", false},
	} {
		got, ok := WorkerOf(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("WorkerOf(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestValidToken(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"abc", true}, {"w-1.abc2", true}, {"", false}, {"a/b", false}, {"A", false},
		{string(make([]byte, 101)), false},
	} {
		if got := ValidToken(tc.in); got != tc.ok {
			t.Errorf("ValidToken(%q) = %v", tc.in, got)
		}
	}
}

// TestValidWorker pins WorkerRule: 1-63 of [a-z0-9-], not starting with '-'.
func TestValidWorker(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{"w-k3j9x2aa", true},
		{"a", true},
		{"0", true},
		{"worker-1", true},
		{strings.Repeat("a", 63), true},
		{strings.Repeat("a", 64), false},
		{"", false},
		{"-w", false},
		{"W-1", false},
		{"w_1", false},
		{"w.1", false},
		{"w 1", false},
	}
	for _, tt := range tests {
		if got := ValidWorker(tt.id); got != tt.want {
			t.Errorf("ValidWorker(%q) = %v, want %v (%s)", tt.id, got, tt.want, WorkerRule)
		}
	}
}
