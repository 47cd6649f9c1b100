//go:build !race

package testutil

// Race reports whether the tests were built with -race.
const Race = false
