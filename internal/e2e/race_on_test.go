//go:build race

package e2e

// raceEnabled: the tests run with -race, so the binary under test is
// built with it too and its race reports fail the test (checkRaces).
const raceEnabled = true
