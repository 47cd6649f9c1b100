package balance

import "math"

// Per-instance smoothing of the cost estimate. Rising faster than falling
// biases the estimate a little above the mean of noisy samples: an
// underestimate herds a burst, an overestimate only spreads it.
const (
	alphaUp   = 0.2
	alphaDown = 0.1
)

// estimator learns the marginal load of one instance from (Δload, Δinstances)
// samples with an asymmetric exponentially weighted moving average.
type estimator struct {
	est      float64
	min, max float64
}

func newEstimator(initial, lo, hi uint64) estimator {
	return estimator{est: float64(initial), min: float64(lo), max: float64(hi)}
}

// observe folds in a report interval in which the instance count grew by
// dInst (> 0) and the load by dLoad (possibly negative, e.g. after a GC).
func (e *estimator) observe(dLoad float64, dInst int) {
	if dInst <= 0 {
		return
	}
	s := dLoad / float64(dInst)
	// A single sample may move the estimate at most 2× either way, and never
	// outside [min, max]: GC swings and instances still loading are common
	// and would otherwise yank it around.
	s = math.Max(s, math.Max(e.min, e.est/2))
	s = math.Min(s, math.Min(e.max, e.est*2))
	a := alphaDown
	if s > e.est {
		a = alphaUp
	}
	// An interval that added n instances counts as n samples of one instance.
	w := 1 - math.Pow(1-a, float64(dInst))
	e.est += w * (s - e.est)
	e.est = math.Min(math.Max(e.est, e.min), e.max)
}

func (e *estimator) value() uint64 { return uint64(math.Round(e.est)) }
