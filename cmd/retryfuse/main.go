// Command retryfuse shows retryfuse at work.
//
//	retryfuse demo   plain retry loop against retryfuse, on local servers
package main

import (
	"fmt"
	"io"
	"os"
)

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

// run dispatches a subcommand and returns the exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	_ = stdin
	if len(args) > 0 && args[0] == "demo" {
		return runDemo(args[1:], stdout, stderr)
	}
	fmt.Fprintln(stderr, "usage: retryfuse demo")
	return 2
}
