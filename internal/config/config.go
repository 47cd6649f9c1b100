// Package config holds what the libraries' Config types share: errors that
// name the offending field, so each front end (the CLI's flags, an
// embedding program's own settings) can say it in its own words.
package config

import (
	"errors"
	"fmt"
)

// FieldError is a bad configuration value. Field is the Go path of the
// field in the library's Config ("Proxies", "Login.Window"); Msg says what
// is wrong with it ("must be >= 0, got -1").
type FieldError struct {
	Field string
	Msg   string
	Err   error // the cause, if any
}

func (e *FieldError) Error() string { return e.Field + " " + e.Msg }

func (e *FieldError) Unwrap() error { return e.Err }

// Errorf returns a *FieldError for field; %w in format keeps the cause.
func Errorf(field, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &FieldError{Field: field, Msg: err.Error(), Err: errors.Unwrap(err)}
}

// Rename rewrites a *FieldError in err's chain with the front end's name
// for its field (names maps Field to, e.g., "--proxies"); a field missing
// from names keeps its Go name. Other errors are returned as they are.
func Rename(err error, names map[string]string) error {
	var fe *FieldError
	if !errors.As(err, &fe) {
		return err
	}
	name, ok := names[fe.Field]
	if !ok {
		return err
	}
	return &FieldError{Field: name, Msg: fe.Msg, Err: fe.Err}
}

// Within names a nested Config's field errors by their path from the
// outer one: Within("Grade", err) turns field "High" into "Grade.High".
func Within(outer string, err error) error {
	var fe *FieldError
	if !errors.As(err, &fe) {
		return err
	}
	return &FieldError{Field: outer + "." + fe.Field, Msg: fe.Msg, Err: fe.Err}
}

// OrDefault gives an unset (zero) or nonsensical (negative) Config field
// its package default: the rule every Config here follows for sizes,
// counts and durations.
func OrDefault[T ~int | ~int32 | ~int64 | ~uint32 | ~float64](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}
