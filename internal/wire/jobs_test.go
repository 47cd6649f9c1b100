package wire

import (
	"errors"
	"math"
	"testing"
)

func TestHistogramQuantile(t *testing.T) {
	h := Histogram{Count: 10, Sum: 12, Buckets: []HistogramBucket{{Le: 0.5, Count: 2}, {Le: 1, Count: 6}, {Le: 5, Count: 9}}}
	tests := []struct {
		q, want float64
	}{{0.1, 0.5}, {0.5, 1}, {0.9, 5}, {0.95, math.Inf(1)}}
	for _, tt := range tests {
		if got := h.Quantile(tt.q); got != tt.want {
			t.Errorf("Quantile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	if (Histogram{}).Quantile(0.5) != 0 {
		t.Error("an empty histogram has no quantile")
	}
}

func TestErrorf(t *testing.T) {
	cause := errors.New("disk full")
	err := Errorf(CodeInvalid, "saving %s: %w", "app", cause)
	var we *Error
	if !errors.As(err, &we) || we.Code != CodeInvalid || err.Error() != "saving app: disk full" || !errors.Is(err, cause) {
		t.Fatalf("Errorf = %#v", err)
	}
	if e := Err(CodeQuota, "100% used"); e.Error() != "100% used" {
		t.Fatalf("Err formatted its message: %q", e.Error())
	}
}
