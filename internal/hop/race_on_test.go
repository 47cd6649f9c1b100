//go:build race

package hop

// raceEnabled: under -race sync.Pool drops what it is given at random, so
// allocation counts are not the program's.
const raceEnabled = true
