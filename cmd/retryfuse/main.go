// Command retryfuse asks retryfuse's decision core questions from the shell.
//
//	retryfuse decide [FILE]   the verdict of contract v1 for one JSON input
//	retryfuse demo            a demonstration of the transport
//	retryfuse keys            a ledger's keys, read and settled (Redis, SQL)
//	retryfuse help            usage
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `Usage:
  retryfuse decide [FILE]   print the verdict of the retry decision contract v1
                            for one JSON input read from FILE (stdin when FILE
                            is absent or "-")
  retryfuse demo            run the demonstration of the transport
  retryfuse keys COMMAND    list, show, settle or reap the keys of a ledger in
                            Redis or SQL ("retryfuse keys -h")
  retryfuse help            print this help

Exit status: 0 success; 1 the input could not be read or the output written;
2 invalid input or usage. "retryfuse decide -h" describes the input.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run is the command without its process: args without the program name.
// It returns the exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "decide":
		return runDecide(args[1:], stdin, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0

	// demo lives in demo.go.
	case "demo":
		return runDemo(args[1:], stdout, stderr)
	case "keys":
		return runKeys(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "retryfuse: unknown command %q\n", args[0])
	fmt.Fprint(stderr, usage)
	return 2
}
