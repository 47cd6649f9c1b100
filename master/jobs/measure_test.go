package jobs

import (
	"testing"
	"time"
)

func TestMaxStartsIn(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms ...int) []time.Time {
		out := make([]time.Time, len(ms))
		for i, m := range ms {
			out[i] = t0.Add(time.Duration(m) * time.Millisecond)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		starts []time.Time
		want   int
	}{
		{"none", nil, 0},
		{"one", at(0), 1},
		{"a second apart", at(0, 1000, 2000), 1},
		{"just inside", at(0, 999), 2},
		{"unsorted", at(2000, 0, 1500, 1999), 3},
		{"burst", at(0, 10, 20, 30, 5000), 4},
	} {
		if got := MaxStartsIn(tc.starts, time.Second); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}
