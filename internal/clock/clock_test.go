package clock

import (
	"testing"
	"time"
)

// The real clock's timers are the standard library's; these only check the
// wiring.
func TestReal(t *testing.T) {
	start := Real.Now()
	<-NewTimer(Real, 0).C
	if Since(Real, start) < 0 {
		t.Fatal("Since went backwards")
	}
	if long := NewTimer(Real, time.Hour); !long.Stop() {
		t.Fatal("a pending timer's Stop reported false")
	}
	k := NewTicker(Real, time.Millisecond)
	<-k.C
	<-k.C
	k.Stop()
}
