package apps

import (
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// TestSamplesValid: every sample bundle loads and passes manifest
// validation (a broken one would stop `cloudbrowser up`), and together they
// show every instantiation strategy.
func TestSamplesValid(t *testing.T) {
	bs, err := Samples()
	if err != nil {
		t.Fatal(err)
	}
	strategies := map[string]bool{}
	for _, b := range bs {
		strategies[b.App().Strategy] = true
	}
	for _, s := range []string{wire.SingleAppInstance, wire.SingleInstancePerUser, wire.SingleBrowserPerUser, wire.MultiInstance} {
		if !strategies[s] {
			t.Errorf("no sample app for strategy %s", s)
		}
	}
}
