//go:build race

package testutil

// Race reports whether the tests were built with -race: the e2e binary is
// then race-built too, and allocation counts are not the program's
// (sync.Pool drops what it is given at random).
const Race = true
