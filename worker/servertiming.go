package worker

import (
	"strings"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
)

// serverTiming collects the steps of a request for a Server-Timing header
// (https://www.w3.org/TR/server-timing/): browsers show them in their
// developer tools and expose them to the page's Navigation Timing, which is
// how scripts/bench/first-frame.sh breaks a first visit down.
type serverTiming struct {
	last  time.Time
	steps []string
}

// step records the time since the previous step (or the start) as name.
func (s *serverTiming) step(name string) {
	now := time.Now()
	s.steps = append(s.steps, httpserve.TimingEntry(name, now.Sub(s.last)))
	s.last = now
}

func (s *serverTiming) String() string { return strings.Join(s.steps, ", ") }
