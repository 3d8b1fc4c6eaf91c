// Command quarantine ends a Redis ledger's quarantine after lost data,
// once the keys that Redis lost have been reconciled: the operator's step
// that Ledger.EndQuarantine takes, from a shell.
//
// When Redis loses records of the ledger (a restart without persistence,
// a snapshot restored, a failover to a lagging replica), every process
// refuses keyed requests for LedgerConfig.Quarantine (InFlightTTL + TTL
// by default, about a day): a key the ledger no longer holds may have been
// applied. Once each write that may have been applied in that window has
// been looked up where it takes effect, run:
//
//	go run ./redis/cmd/quarantine -redis host:port [-prefix retryfuse:ledger:] \
//		-end -reconciled -reason "who, and what was checked"
//
// (-cluster host:port,host:port,... for a Redis Cluster.) It is refused
// without -end, -reconciled and a -reason; the end and its reason are
// recorded on the ledger's markers in Redis, and every process ends its
// quarantine when it next looks at them (within a second while it is in
// quarantine), each reporting it to its LedgerConfig.OnQuarantineEnd. It
// exits 0 when the quarantine was ended, 1 when it was refused or failed
// (no quarantine to end, Redis unreachable), 2 on bad usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	retryfuseredis "github.com/retryfuse/retryfuse/redis"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("quarantine", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("redis", "", "the Redis server, host:port")
	cluster := fs.String("cluster", "", "the Redis Cluster, host:port,host:port,...")
	prefix := fs.String("prefix", retryfuseredis.DefaultLedgerPrefix, "the ledger's LedgerConfig.Prefix")
	end := fs.Bool("end", false, "end the quarantine (required: this command does nothing else)")
	reconciled := fs.Bool("reconciled", false, "say that the keys Redis lost have been reconciled (required)")
	reason := fs.String("reason", "", "who ends the quarantine, and what was reconciled (required; recorded)")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for Redis")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 || (*addr == "") == (*cluster == "") {
		fmt.Fprintln(stderr, "quarantine: give one of -redis or -cluster, and flags only")
		fs.Usage()
		return 2
	}
	if !*end {
		fmt.Fprintln(stderr, "quarantine: nothing done: -end is required to end the quarantine")
		return 2
	}

	var client redis.UniversalClient
	if *cluster != "" {
		client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(*cluster, ","), ContextTimeoutEnabled: true})
	} else {
		client = redis.NewClient(&redis.Options{Addr: *addr, ContextTimeoutEnabled: true})
	}
	defer client.Close()
	// The ledger is opened to act on it, not to take requests: whether
	// Redis persists its data is the business of the processes that do.
	l, err := retryfuseredis.NewLedger(client, retryfuseredis.LedgerConfig{Prefix: *prefix, Timeout: *timeout, AllowWithoutPersistence: true})
	if err != nil {
		fmt.Fprintln(stderr, "quarantine:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	defer func() { _ = l.Close(ctx) }()

	err = l.EndQuarantine(ctx, retryfuseredis.QuarantineEnd{Reconciled: *reconciled, Reason: *reason})
	switch {
	case errors.Is(err, retryfuseredis.ErrUnconfirmed):
		fmt.Fprintln(stderr, "quarantine: refused:", err, "(flags -reconciled and -reason)")
		return 1
	case err != nil:
		fmt.Fprintln(stderr, "quarantine:", err)
		return 1
	}
	fmt.Fprintf(stdout, "quarantine of the ledger %q ended: %s\n", *prefix, strings.TrimSpace(*reason))
	return 0
}
