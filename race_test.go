//go:build race

package retryfuse

// raceEnabled reports whether the race detector is on; it changes what
// allocates.
const raceEnabled = true
