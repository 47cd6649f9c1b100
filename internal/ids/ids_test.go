package ids

import "testing"

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
