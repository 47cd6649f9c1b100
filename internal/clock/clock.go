// Package clock is the one time source that packages take in their Config,
// so tests can drive time with clocktest.Clock instead of sleeping.
package clock

import "time"

// Clock tells the time and runs timers.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine (or, for a fake clock, in the
	// one advancing time) after d.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a stoppable pending call.
type Timer interface {
	// Stop reports whether it stopped the call before it ran.
	Stop() bool
}

// Real is the system clock, the default everywhere.
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time                            { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
