package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/retryfuse/retryfuse/decide"
)

const decideUsage = `Usage: retryfuse decide [FILE]

Reads one JSON object, an input of the retry decision contract v1, from FILE
(stdin when FILE is absent or "-") and prints its verdict as one line of JSON:

  $ echo '{"contractVersion":1,"request":{"method":"POST","idempotencyKey":true},
           "attempts":[{"outcome":"timeout","phase":"post_write"}]}' | retryfuse decide
  {"contractVersion":1,"decision":"reconcile_required","evidence":"unknown","rule":3,"reason":"..."}

Input fields (defaults in brackets):
  contractVersion            1 (required)
  policy.failureThreshold    positive integer [5]
  policy.budgetUnits         positive number [100]
  request.method             HTTP method, case-sensitive ["GET"]
  request.idempotencyKey     boolean [false]
  request.replayableBody     boolean [true]
  keyState                   none, in_flight, completed, conflict ["none"]
  attempts[]                 oldest first [[]]
  attempts[].outcome         success, failure, timeout, unknown (required)
  attempts[].phase           pre_write, post_write, unknown ["unknown"]
  attempts[].costUnits       non-negative number [1]

decision and evidence are the answer; rule and reason are informative.

Exit status: 0 a verdict was printed; 1 FILE could not be read or the verdict
written; 2 invalid input (one line on stderr names the field and the problem,
nothing on stdout) or usage.
`

func runDecide(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("decide", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, decideUsage)
			return 0
		}
		fmt.Fprintf(stderr, "retryfuse decide: %v (see retryfuse decide -h)\n", err)
		return 2
	}
	if fs.NArg() > 1 {
		fmt.Fprintln(stderr, "retryfuse decide: one FILE at most (see retryfuse decide -h)")
		return 2
	}
	in := stdin
	if name := fs.Arg(0); name != "" && name != "-" {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintf(stderr, "retryfuse decide: %v\n", err)
			return 1
		}
		defer f.Close()
		in = f
	}

	input, err := decide.DecodeInput(in)
	var invalid *decide.InputError
	switch {
	case errors.As(err, &invalid):
		where := ""
		if invalid.Field != "" {
			where = invalid.Field + ": "
		}
		fmt.Fprintf(stderr, "retryfuse decide: invalid input: %s%s\n", where, invalid.Problem)
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "retryfuse decide: %v\n", err)
		return 1
	}

	var out bytes.Buffer
	if err := decide.EncodeVerdict(&out, decide.Decide(input)); err != nil {
		fmt.Fprintf(stderr, "retryfuse decide: %v\n", err)
		return 1
	}
	if _, err := stdout.Write(out.Bytes()); err != nil {
		fmt.Fprintf(stderr, "retryfuse decide: writing the verdict: %v\n", err)
		return 1
	}
	return 0
}
