package config

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

func TestFieldError(t *testing.T) {
	cause := fs.ErrNotExist
	for _, tc := range []struct {
		name  string
		err   error
		names map[string]string
		want  string
		cause error
	}{
		{"plain", Errorf("Proxies", "must be >= 0, got %d", -1), nil, "Proxies must be >= 0, got -1", nil},
		{"renamed", Errorf("Proxies", "must be >= 0, got %d", -1), map[string]string{"Proxies": "--proxies"}, "--proxies must be >= 0, got -1", nil},
		{"wrapped", fmt.Errorf("master: %w", Errorf("Login.Window", "must be positive, got %v", 0)),
			map[string]string{"Login.Window": "--login-window"}, "--login-window must be positive, got 0", nil},
		{"unknown field keeps its name", Errorf("Other", "is bad"), map[string]string{"Proxies": "--proxies"}, "Other is bad", nil},
		{"cause kept", Errorf("PublicURL", "%w", cause), map[string]string{"PublicURL": "--public-url"}, "--public-url " + cause.Error(), cause},
		{"not a field error", errors.New("boom"), map[string]string{"Proxies": "--proxies"}, "boom", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Rename(tc.err, tc.names)
			if got.Error() != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			if tc.cause != nil && !errors.Is(got, tc.cause) {
				t.Fatalf("%v lost its cause %v", got, tc.cause)
			}
		})
	}
}
