//go:build !race

package main

// raceEnabled reports whether the race detector is on: it slows the
// demo's clients several times over, so that in the overload scenario the
// clients, not the dependency, set the pace.
const raceEnabled = false
