// Package apps holds the sample application bundles, embedded in the binary
// so `cloudbrowser up` deploys them on any machine.
package apps

import (
	"embed"

	"github.com/cloudbrowser-go/cloudbrowser/internal/bundle"
)

//go:embed hello notes chat pooldemo whiteboard tasks
var samples embed.FS

// Samples loads the sample bundles.
func Samples() ([]*bundle.Bundle, error) { return bundle.LoadAll(samples, ".") }
