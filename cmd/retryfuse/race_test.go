//go:build race

package main

// raceEnabled reports whether the race detector is on: it slows every
// goroutine several times over, which changes what a scenario measured
// in wall-clock time shows.
const raceEnabled = true
