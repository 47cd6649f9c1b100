package pool

import (
	"github.com/cloudbrowser-go/cloudbrowser/internal/bundle"
	"github.com/cloudbrowser-go/cloudbrowser/internal/sequence"
)

// Config is a pool's configuration: the "pool" object of an app manifest,
// defined and validated with the manifest (internal/bundle).
type Config = bundle.PoolConfig

// Duration is a JSON duration ("30s", "10m"; 0 disables a feature).
type Duration = sequence.Duration

// TypeChromium is the browser type of the Chromium runtime.
const TypeChromium = bundle.BrowserChromium
