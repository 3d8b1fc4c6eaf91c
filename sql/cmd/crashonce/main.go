// Command crashonce sends keyed writes from a retryfuse client fleet,
// through a fault proxy, to server processes behind the idempotency
// middleware, while it kills a random server with SIGKILL about every
// second and starts it again, and counts from the database (and the
// downstream's own records) the effects applied twice and the keys left
// uncertain.
//
// Ledgers (-ledger), each run on tables (or keys) of its own:
//
//   - sql: the transactional mode on one PostgreSQL; each server writes
//     its effect in the request's transaction, with the key's claim and
//     the recorded response. Keys applied twice and keys left uncertain
//     must both be 0.
//   - redis: the ordinary mode on retryfuseredis.Ledger (a redis-server
//     the run starts, append-only file, fsync always); the effect is
//     written to the same PostgreSQL outside any transaction. A server
//     killed between its effect and the record of its response leaves
//     the key uncertain: the run counts them. None may be applied twice.
//
// Phases (-phases), each with keys of its own:
//
//   - effect: the handler writes its effect;
//   - foreign: the handler first makes one foreign call, to a fake
//     downstream API that honours keys (the idempotency middleware on a
//     ledger.Memory of its own, in this process, behind a fault proxy of
//     its own), under the key of idempotency.Step(ctx, "charge"); the
//     downstream counts its own charges, each of which must be applied
//     at most once.
//
// At the end of each run every key is sent once more, straight to a
// server, and the counts are taken.
//
// Usage, with PG_DSN (or -dsn) naming a PostgreSQL database:
//
//	go run ./sql/cmd/crashonce [-calls 20000] [-callers 16] [-servers 4] [-kill-every 1s] [-ledger sql,redis] [-phases effect,foreign]
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	retryfusesql "github.com/retryfuse/retryfuse/sql"
)

// options are a run's settings (see the flags).
type options struct {
	dsn, table              string
	ledger                  string // sql or redis
	foreign                 bool   // the handler makes a foreign call
	redis                   string // the Redis address, with ledger redis
	calls, callers, servers int
	attempts                int
	killEvery               time.Duration
	flightTTL               time.Duration // the Redis ledger's InFlightTTL
	f503, fLost             float64
	seed                    uint64
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-serve" {
		os.Exit(serveMain(os.Args[2:]))
	}
	var o options
	flag.StringVar(&o.dsn, "dsn", os.Getenv("PG_DSN"), "the PostgreSQL database (default $PG_DSN)")
	ledgers := flag.String("ledger", "sql", "ledgers to run, in order: sql (the transactional mode on PostgreSQL), redis (the ordinary mode on a Redis the run starts)")
	phases := flag.String("phases", "effect,foreign", "phases to run, in order: effect, foreign (one call to a downstream API under the key of a Step)")
	flag.IntVar(&o.calls, "calls", 20000, "keyed writes sent a run")
	flag.IntVar(&o.callers, "callers", 16, "concurrent callers")
	flag.IntVar(&o.servers, "servers", 4, "server processes")
	flag.DurationVar(&o.killEvery, "kill-every", time.Second, "mean interval between two kills (each ±50%)")
	flag.DurationVar(&o.flightTTL, "flight-ttl", 5*time.Second, "the Redis ledger's InFlightTTL: a killed server's claim is uncertain after it")
	flag.Float64Var(&o.f503, "f503", 0.03, "share of exchanges answered 503 by a proxy")
	flag.Float64Var(&o.fLost, "flost", 0.05, "share of exchanges whose response a proxy drops after the server answered")
	flag.IntVar(&o.attempts, "attempts", 8, "the client's Transport.MaxAttempts")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the kills and the proxies' faults")
	flag.Parse()
	if o.dsn == "" {
		fail(errors.New("no database: set PG_DSN or -dsn (scripts/sql-test shows how to start a PostgreSQL)"))
	}
	self, err := os.Executable()
	if err != nil {
		fail(err)
	}
	var results []result
	for _, l := range strings.Split(*ledgers, ",") {
		if l != "sql" && l != "redis" {
			fail(fmt.Errorf("unknown ledger %q: sql or redis", l))
		}
		var rs *redisServer
		if l == "redis" {
			dir, err := os.MkdirTemp("", "crashonce")
			if err != nil {
				fail(err)
			}
			defer os.RemoveAll(dir)
			if rs, err = startRedis(dir); err != nil {
				fail(err)
			}
		}
		for _, p := range strings.Split(*phases, ",") {
			if p != "effect" && p != "foreign" {
				fail(fmt.Errorf("unknown phase %q: effect or foreign", p))
			}
			ro := o
			ro.ledger, ro.foreign = l, p == "foreign"
			if rs != nil {
				ro.redis = rs.addr
			}
			res, err := run(ro, []string{self}, os.Stdout)
			if err != nil {
				fail(err)
			}
			results = append(results, res)
			fmt.Println()
		}
		if rs != nil {
			rs.stop()
		}
	}
	summary(os.Stdout, results)
	for _, r := range results {
		if !r.ok() {
			fmt.Println("\ncrashonce: FAILED")
			os.Exit(1)
		}
	}
}

// serveMain is a server process's main: the flags after -serve.
func serveMain(args []string) int {
	var o serveOptions
	fs := flag.NewFlagSet("crashonce -serve", flag.ExitOnError)
	serveFlags(fs, &o)
	_ = fs.Parse(args)
	return serve(o)
}

// run runs the fleet against servers started with serveCmd (then the
// server's options), prints its table to w, and returns the counts.
func run(o options, serveCmd []string, w io.Writer) (result, error) {
	own := o.table == ""
	if own {
		o.table = "crashonce_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	res := result{ledger: o.ledger, foreign: o.foreign, calls: o.calls}
	db, err := sql.Open("pgx", o.dsn)
	if err != nil {
		return res, err
	}
	defer db.Close()
	ctx := context.Background()
	if o.ledger == "sql" {
		if _, err := retryfusesql.NewLedger(ctx, db, retryfusesql.LedgerConfig{Dialect: retryfusesql.Postgres, Table: o.table}); err != nil {
			return res, err
		}
	}
	if own {
		defer db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+o.table+", "+o.table+"_schema, "+o.table+"_effects")
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+o.table+"_effects (idem TEXT NOT NULL, pid INTEGER NOT NULL)"); err != nil {
		return res, err
	}
	so := serveOptions{dsn: o.dsn, table: o.table, ledger: o.ledger, redis: o.redis}
	if o.ledger == "redis" {
		so.flightTTL = o.flightTTL
	} else {
		so.flightTTL = 30 * time.Second
	}
	var down *downstream
	var downProxy *proxy
	if o.foreign {
		if down, err = startDownstream(); err != nil {
			return res, err
		}
		defer down.close()
		downProxy = newProxy(func(*rand.Rand) string { return down.addr }, o.f503, o.fLost, o.seed+100)
		u, stop, err := listen(downProxy)
		if err != nil {
			return res, err
		}
		defer stop()
		so.downstream = u
	}
	s := &servers{cmd: serveCmd, o: so}
	defer s.stop()
	if err := s.start(o.servers); err != nil {
		return res, err
	}
	p := newProxy(s.pick, o.f503, o.fLost, o.seed)
	url, stop, err := listen(p)
	if err != nil {
		return res, err
	}
	defer stop()

	phase := "effect"
	if o.foreign {
		phase = "foreign: one call to a downstream API under the key of idempotency.Step(ctx, \"charge\"), then the effect"
	}
	mode := "the transactional middleware on one PostgreSQL"
	if o.ledger == "redis" {
		mode = "the middleware on one Redis (retryfuseredis.Ledger, InFlightTTL " + o.flightTTL.String() + "), the effect in PostgreSQL outside a transaction"
	}
	fmt.Fprintf(w, "crashonce [%s, %s]: %d server processes behind %s (table %s), a fault proxy (%.0f%% 503, %.0f%% responses lost), %d callers, %d keyed writes, a server killed about every %s; phase %s\n\n",
		o.ledger, res.phase(), o.servers, mode, o.table, 100*o.f503, 100*o.fLost, o.callers, o.calls, o.killEvery, phase)
	stopKills := make(chan struct{})
	killsDone := make(chan error, 1)
	go func() { killsDone <- killLoop(s, o.killEvery, o.seed, stopKills) }()

	start := time.Now()
	res.out = runFleet(url, o.calls, o.callers, o.attempts)
	close(stopKills)
	if err := <-killsDone; err != nil {
		return res, err
	}
	res.elapsed = time.Since(start)
	wait := 5 * time.Second
	if o.ledger == "redis" {
		wait += o.flightTTL
	}
	res.settled = settle(s, o.calls, wait)
	if res.c, err = count(ctx, db, o.table, o.calls, o.ledger == "sql", res.settled); err != nil {
		return res, err
	}
	if down != nil {
		d := down.counts()
		res.down = &d
		res.c.compareDownstream(d)
	}
	res.kills = s.kills
	res.faults = p.faults()
	if downProxy != nil {
		res.downFaults = downProxy.faults()
	}
	report(w, res)
	return res, nil
}

// listen serves h on a loopback port, and returns its URL and how to stop it.
func listen(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h}
	served := make(chan struct{})
	go func() { srv.Serve(ln); close(served) }()
	return "http://" + ln.Addr().String(), func() { srv.Close(); <-served }, nil
}

// killLoop kills a random server and starts it again, at random
// intervals around every, until stop is closed.
func killLoop(s *servers, every time.Duration, seed uint64, stop chan struct{}) error {
	r := rand.New(rand.NewPCG(seed, 2))
	for {
		wait := every/2 + time.Duration(r.Int64N(int64(every)+1))
		select {
		case <-stop:
			return nil
		case <-time.After(wait):
		}
		if err := s.killOne(r); err != nil {
			return err
		}
	}
}

func keyOf(i int) string { return "crashonce-" + strconv.Itoa(i) }

// gaveUpKey is the context key of a call's slot for the reason its
// Transport gave up (Hooks.GiveUp), read when the call ends.
type gaveUpKey struct{}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "crashonce:", err)
	os.Exit(1)
}
