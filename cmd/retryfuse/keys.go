package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/retryfuse/retryfuse/ledger"
)

// This file is "retryfuse keys": a ledger's keys read and settled by an
// operator, in Redis or a SQL database (keys_store.go opens them,
// keys_print.go prints what they say).

const keysUsage = `Usage: retryfuse keys COMMAND STORE [FLAGS]

Reads and settles the idempotency keys of a retryfuse ledger, in Redis or in a
SQL database, without SQL or Lua of your own.

Commands:
  list     list keys, by state and age: how many are stuck, which, since when
             --state S        in_flight, uncertain, completed, stuck (in_flight
                              or uncertain) or any [stuck]
             --older-than D   only keys in their state for at least D [0]
             --max N          stop after N keys [100]; --page N records read
                              per round trip [500]
  show     one key's state: --key KEY (exit status 1 when the key is free)
  settle   record a stuck key's outcome, learnt elsewhere (the other side's
           records): --key KEY --expect in_flight|uncertain, and one of
             --applied        the effect happened: later calls under the key
                              are replayed (with --status, --header 'Name:
                              value' (repeatable), --body-file FILE) or, with
                              no --status, asked to reconcile
             --not-applied    the effect did not happen: the key is free
           --version V settles only the version V that show printed; without
           it the version read just before is settled. --any-state settles
           whatever in_flight or uncertain state the key is in (no --expect).
  reap     delete records whose time has passed (they read as free already):
           --limit N at most N [1000]. Redis deletes its own: nothing to reap.

Store (one of):
  --redis ADDR [--prefix P]           a Redis ledger (prefix [retryfuse:ledger:])
  --sql DSN --driver postgres|sqlite  a SQL ledger [--table T] [retryfuse_keys]
  --ttl D, --in-flight-ttl D          the ledger's TTL and InFlightTTL, as its
                                      writers set them [24h, 5m]: a SQL key's
                                      times, a Redis in-flight key's age, and a
                                      settled key's life are measured by them
  --timeout D                         bound of the whole command [30s]

Output: a table; --json prints JSON instead (one object, or one per line for
list). Exit status: 0 done; 1 a key not found (show), a settle refused (the key
is not as expected: what was found is printed), or the store failed or holds no
ledger (the command never makes one); 2 usage.
`

// keysFlags are the flags of every keys command.
type keysFlags struct {
	store                storeFlags
	json                 bool
	timeout              time.Duration
	key, expect, version string
	state                string
	olderThan            time.Duration
	max, page, limit     int
	applied, notApplied  bool
	anyState             bool
	status               int
	headers              multiFlag
	bodyFile             string
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ", ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// usageError is an error of the command line: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

func runKeys(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		if len(args) == 0 {
			fmt.Fprint(stderr, keysUsage)
			return 2
		}
		fmt.Fprint(stdout, keysUsage)
		return 0
	}
	cmd := args[0]
	var f keysFlags
	fs := flag.NewFlagSet("keys "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.store.register(fs)
	fs.BoolVar(&f.json, "json", false, "")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "")
	switch cmd {
	case "list":
		fs.StringVar(&f.state, "state", "stuck", "")
		fs.DurationVar(&f.olderThan, "older-than", 0, "")
		fs.IntVar(&f.max, "max", 100, "")
		fs.IntVar(&f.page, "page", 500, "")
	case "show":
		fs.StringVar(&f.key, "key", "", "")
	case "settle":
		fs.StringVar(&f.key, "key", "", "")
		fs.StringVar(&f.expect, "expect", "", "")
		fs.StringVar(&f.version, "version", "", "")
		fs.BoolVar(&f.applied, "applied", false, "")
		fs.BoolVar(&f.notApplied, "not-applied", false, "")
		fs.BoolVar(&f.anyState, "any-state", false, "")
		fs.IntVar(&f.status, "status", 0, "")
		fs.Var(&f.headers, "header", "")
		fs.StringVar(&f.bodyFile, "body-file", "", "")
	case "reap":
		fs.IntVar(&f.limit, "limit", 1000, "")
	default:
		fmt.Fprintf(stderr, "retryfuse keys: unknown command %q (see retryfuse keys -h)\n", cmd)
		return 2
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, keysUsage)
			return 0
		}
		fmt.Fprintf(stderr, "retryfuse keys %s: %v (see retryfuse keys -h)\n", cmd, err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "retryfuse keys %s: unexpected argument %q (see retryfuse keys -h)\n", cmd, fs.Arg(0))
		return 2
	}
	err := f.check(cmd)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
		defer cancel()
		err = runKeysCommand(ctx, cmd, &f, stdout)
	}
	var u usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &u):
		fmt.Fprintf(stderr, "retryfuse keys %s: %v (see retryfuse keys -h)\n", cmd, err)
		return 2
	case errors.Is(err, errNotFound):
		return 1 // show printed the key as free
	}
	fmt.Fprintf(stderr, "retryfuse keys %s: %v\n", cmd, err)
	return 1
}

// errNotFound: show found the key free; it printed so already.
var errNotFound = errors.New("key not found")

// check reports a usage error in f for cmd.
func (f *keysFlags) check(cmd string) error {
	if err := f.store.check(); err != nil {
		return err
	}
	if f.timeout <= 0 {
		return usagef("--timeout must be positive")
	}
	switch cmd {
	case "list":
		if _, err := parseListState(f.state); err != nil {
			return err
		}
		if f.olderThan < 0 || f.max <= 0 || f.page <= 0 || f.page > ledger.MaxListLimit {
			return usagef("--older-than must not be negative, --max must be positive, --page 1 to %d", ledger.MaxListLimit)
		}
	case "show":
		if f.key == "" {
			return usagef("--key is required")
		}
	case "settle":
		return f.checkSettle()
	case "reap":
		if f.limit <= 0 {
			return usagef("--limit must be positive")
		}
	}
	return nil
}

func (f *keysFlags) checkSettle() error {
	switch {
	case f.key == "":
		return usagef("--key is required: settle acts on one key, named exactly")
	case f.applied == f.notApplied:
		return usagef("one of --applied and --not-applied is required")
	case f.expect == "" && !f.anyState:
		return usagef("--expect in_flight|uncertain is required (the state you saw), unless --any-state")
	case f.expect != "" && f.anyState:
		return usagef("--expect and --any-state exclude each other")
	case f.expect != "" && f.expect != "in_flight" && f.expect != "uncertain":
		return usagef("--expect %q: only an in_flight or uncertain key can be settled", f.expect)
	case f.notApplied && (f.status != 0 || len(f.headers) > 0 || f.bodyFile != ""):
		return usagef("--status, --header and --body-file go with --applied")
	case (len(f.headers) > 0 || f.bodyFile != "") && f.status == 0:
		return usagef("--header and --body-file need --status")
	case f.status != 0 && (f.status < 100 || f.status > 999):
		return usagef("--status %d is not an HTTP status", f.status)
	}
	for _, h := range f.headers {
		if name, _, ok := strings.Cut(h, ":"); !ok || strings.TrimSpace(name) == "" {
			return usagef("--header %q is not 'Name: value'", h)
		}
	}
	return nil
}

// parseListState returns the Query state of --state and whether it means
// stuck (in flight or uncertain).
func parseListState(s string) (st ledger.State, err error) {
	switch s {
	case "stuck", "any":
		return ledger.StateFree, nil
	case "free":
		return 0, usagef("--state free: the ledger holds nothing for a free key")
	}
	if err := st.UnmarshalText([]byte(s)); err != nil {
		return 0, usagef("--state %q: want in_flight, uncertain, completed, stuck or any", s)
	}
	return st, nil
}
