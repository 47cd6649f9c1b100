package jobs

import "testing"

func TestPickWorker(t *testing.T) {
	for _, tc := range []struct {
		name     string
		free     map[string]int
		avoid    map[string]bool
		fallback bool
		last     string
		want     string
	}{
		{"none", map[string]int{}, nil, false, "", ""},
		{"no free slot", map[string]int{"a": 0}, nil, false, "", ""},
		{"most free", map[string]int{"a": 1, "b": 3, "c": 2}, nil, false, "", "b"},
		{"tie round robin first", map[string]int{"a": 2, "b": 2}, nil, false, "", "a"},
		{"tie round robin after last", map[string]int{"a": 2, "b": 2, "c": 2}, nil, false, "a", "b"},
		{"tie wraps", map[string]int{"a": 2, "b": 2}, nil, false, "b", "a"},
		{"avoid earlier worker", map[string]int{"a": 5, "b": 1}, map[string]bool{"a": true}, false, "", "b"},
		{"only avoided, others exist", map[string]int{"a": 5}, map[string]bool{"a": true}, false, "", ""},
		{"only avoided, fallback", map[string]int{"a": 5}, map[string]bool{"a": true}, true, "", "a"},
		{"fallback prefers others on tie", map[string]int{"a": 2, "b": 2}, map[string]bool{"a": true}, true, "", "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pickWorker(tc.free, tc.avoid, tc.fallback, tc.last); got != tc.want {
				t.Fatalf("pickWorker = %q, want %q", got, tc.want)
			}
		})
	}
}
