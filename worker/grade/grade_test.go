package grade

import (
	"errors"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock/clocktest"
	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

const ms = time.Millisecond

// window is one window's samples (nil = a window with no call at all).
type window []time.Duration

func many(d time.Duration, n int) window {
	w := make(window, n)
	for i := range w {
		w[i] = d
	}
	return w
}

func repeat(w window, n int) []window {
	out := make([]window, n)
	for i := range out {
		out[i] = w
	}
	return out
}

func repeatF(f float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = f
	}
	return out
}

func TestGovernor(t *testing.T) {
	hot, calm, mid := many(80*ms, 10), many(10*ms, 10), many(35*ms, 10)
	tests := []struct {
		name     string
		minScale float64
		windows  []window
		want     []float64 // scale after each window
	}{
		{"fast stays full", 0, []window{calm, calm, calm}, []float64{1, 1, 1}},
		{"hot steps down to the minimum", 0, []window{hot, hot, hot}, []float64{0.75, 0.5, 0.5}},
		{"calm windows step back up", 0, []window{hot, hot, calm, calm, calm, calm, calm, calm},
			[]float64{0.75, 0.5, 0.5, 0.5, 0.75, 0.75, 0.75, 1}},
		{"in between holds and restarts the calm count", 0, []window{hot, calm, calm, mid, calm, calm, calm},
			[]float64{0.75, 0.75, 0.75, 0.75, 0.75, 0.75, 1}},
		{"too few samples count as calm", 0, []window{hot, many(500*ms, 4), many(500*ms, 4), many(500*ms, 4)},
			[]float64{0.75, 0.75, 0.75, 1}},
		{"one slow sample in ten is under p90", 0, []window{append(many(10*ms, 9), time.Second)}, []float64{1}},
		{"two slow samples in ten are over p90", 0, []window{append(many(10*ms, 8), time.Second, time.Second)}, []float64{0.75}},
		{"idle windows are calm", 0, []window{hot, hot, nil, nil, nil, nil, nil, nil}, []float64{0.75, 0.5, 0.5, 0.5, 0.75, 0.75, 0.75, 1}},
		{"a step up undone at once doubles the calm it takes", 0,
			[]window{hot, calm, calm, calm, hot, calm, calm, calm, calm, calm, calm},
			[]float64{0.75, 0.75, 0.75, 1, 0.75, 0.75, 0.75, 0.75, 0.75, 0.75, 1}},
		{"and again", 0,
			[]window{hot, calm, calm, calm, hot, calm, calm, calm, calm, calm, calm, hot, calm, calm, calm, calm, calm, calm},
			[]float64{0.75, 0.75, 0.75, 1, 0.75, 0.75, 0.75, 0.75, 0.75, 0.75, 1, 0.75, 0.75, 0.75, 0.75, 0.75, 0.75, 0.75}},
		{"a step up that holds is forgiven", 0,
			append(append([]window{hot, calm, calm, calm, hot, calm, calm, calm, calm, calm, calm}, repeat(calm, 61)...), hot, calm, calm, calm),
			append(append([]float64{0.75, 0.75, 0.75, 1, 0.75, 0.75, 0.75, 0.75, 0.75, 0.75, 1}, repeatF(1, 61)...), 0.75, 0.75, 0.75, 1)},
		{"MinScale 1 turns grading off", 1, []window{hot, hot}, []float64{1, 1}},
		{"MinScale 0.3 ends the steps", 0.3, []window{hot, hot, hot, hot}, []float64{0.75, 0.5, 0.3, 0.3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktest.New(time.Unix(1000, 0))
			g, err := New(Config{MinScale: tt.minScale, Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			for i, w := range tt.windows {
				for _, d := range w {
					g.Observe(d)
				}
				clk.Advance(time.Second)
				if w == nil {
					continue // nobody asks in an idle window
				}
				if got := g.Scale(); got != tt.want[i] {
					t.Fatalf("after window %d: scale %v, want %v", i+1, got, tt.want[i])
				}
			}
			if got := g.Scale(); got != tt.want[len(tt.want)-1] {
				t.Fatalf("at the end: scale %v, want %v", got, tt.want[len(tt.want)-1])
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		cfg   Config
		field string
	}{
		{Config{MinScale: 1.5}, "MinScale"},
		{Config{MinScale: -0.1}, "MinScale"},
		{Config{High: -ms}, "High"},
		{Config{Low: -ms}, "Low"},
		{Config{Window: -ms}, "Window"},
		{Config{High: 20 * ms, Low: 20 * ms}, "Low"},
		{Config{High: 10 * ms}, "Low"}, // the default Low (25 ms) is not below it
	}
	for _, tt := range tests {
		_, err := New(tt.cfg)
		var fe *config.FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("%+v: %v, want an error naming %s", tt.cfg, err, tt.field)
		}
	}
	if _, err := New(Config{}); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}
