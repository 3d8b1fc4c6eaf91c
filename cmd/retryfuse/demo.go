package main

import (
	"fmt"
	"io"
)

// runDemo is the demo subcommand. It is a placeholder until the
// demonstration is written.
func runDemo(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "demo: not built yet")
	return 1
}
