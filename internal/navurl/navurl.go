// Package navurl says which URLs a virtual browser may be sent to. Both
// the browser runtime (client input) and sequence validation (app
// manifests, checked on the master too) apply it, so it sits below both.
package navurl

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Check accepts the URLs a client may open: http(s), data: and
// about:blank. Other schemes (file:, chrome:, javascript:, ...) would let a
// client read the worker's files or poke at browser internals.
func Check(raw string) error {
	if raw == "" {
		return errors.New("empty url")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("bad url: %w", err)
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
		if u.Host == "" {
			return fmt.Errorf("url %q has no host", raw)
		}
	case "data":
	case "about":
		if u.Opaque != "blank" {
			return fmt.Errorf("url %q not allowed", raw)
		}
	default:
		return fmt.Errorf("scheme %q not allowed", u.Scheme)
	}
	return nil
}
