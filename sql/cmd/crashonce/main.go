// Command crashonce sends keyed writes from a retryfuse client fleet,
// through a fault proxy, to server processes behind the idempotency
// middleware in its transactional mode on one PostgreSQL, while it kills
// a random server with SIGKILL about every second and starts it again.
// Each server writes its effect in the request's transaction, with the
// key's claim and the recorded response. At the end every key is sent
// once more, straight to a server, and the counts are taken from the
// database: keys applied twice and keys left uncertain must both be 0.
//
// Usage, with PG_DSN (or -dsn) naming a PostgreSQL database:
//
//	go run ./sql/cmd/crashonce [-calls 3000] [-callers 16] [-servers 3] [-kill-every 1s]
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
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/idempotency"
	retryfusesql "github.com/retryfuse/retryfuse/sql"
)

// options are a run's settings (see the flags).
type options struct {
	dsn, table              string
	calls, callers, servers int
	attempts                int
	killEvery               time.Duration
	f503, fLost             float64
	seed                    uint64
}

func main() {
	var o options
	flag.StringVar(&o.dsn, "dsn", os.Getenv("PG_DSN"), "the PostgreSQL database (default $PG_DSN)")
	flag.StringVar(&o.table, "table", "", "the ledger's table (default: one of the run's own, dropped at the end)")
	serveMode := flag.Bool("serve", false, "run as a server process (crashonce starts them)")
	flag.IntVar(&o.calls, "calls", 3000, "keyed writes sent")
	flag.IntVar(&o.callers, "callers", 16, "concurrent callers")
	flag.IntVar(&o.servers, "servers", 3, "server processes")
	flag.DurationVar(&o.killEvery, "kill-every", time.Second, "mean interval between two kills (each ±50%)")
	flag.Float64Var(&o.f503, "f503", 0.03, "share of exchanges answered 503 by the proxy")
	flag.Float64Var(&o.fLost, "flost", 0.05, "share of exchanges whose response the proxy drops after the server answered")
	flag.IntVar(&o.attempts, "attempts", 8, "the client's Transport.MaxAttempts")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the kills and the proxy's faults")
	flag.Parse()
	if o.dsn == "" {
		fail(errors.New("no database: set PG_DSN or -dsn (scripts/sql-test shows how to start a PostgreSQL)"))
	}
	if *serveMode {
		os.Exit(serve(o.dsn, o.table))
	}
	self, err := os.Executable()
	if err != nil {
		fail(err)
	}
	c, err := run(o, []string{self}, os.Stdout)
	if err != nil {
		fail(err)
	}
	if !c.ok() {
		fmt.Println("\ncrashonce: FAILED")
		os.Exit(1)
	}
}

// ok reports whether every key was applied exactly once, with its
// completion, and none is left uncertain.
func (c counts) ok() bool {
	return c.twice == 0 && c.uncertain == 0 && c.missing == 0 && c.orphans == 0
}

// run runs the fleet against servers started with serveCmd (then
// "-serve", "-dsn", "-table"), prints its table to w, and returns the
// database's counts.
func run(o options, serveCmd []string, w io.Writer) (counts, error) {
	own := o.table == ""
	if own {
		o.table = "crashonce_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	db, err := sql.Open("pgx", o.dsn)
	if err != nil {
		return counts{}, err
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := retryfusesql.NewLedger(ctx, db, retryfusesql.LedgerConfig{Dialect: retryfusesql.Postgres, Table: o.table}); err != nil {
		return counts{}, err
	}
	if own {
		defer db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+o.table+", "+o.table+"_schema, "+o.table+"_effects")
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+o.table+"_effects (idem TEXT NOT NULL, pid INTEGER NOT NULL)"); err != nil {
		return counts{}, err
	}
	s := &servers{cmd: serveCmd, dsn: o.dsn, table: o.table}
	defer s.stop()
	if err := s.start(o.servers); err != nil {
		return counts{}, err
	}
	p := &proxy{servers: s, f503: o.f503, fLost: o.fLost, rand: rand.New(rand.NewPCG(o.seed, 1)),
		tr: &http.Transport{MaxIdleConnsPerHost: 64, ResponseHeaderTimeout: 10 * time.Second}}
	defer p.tr.CloseIdleConnections()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return counts{}, err
	}
	front := &http.Server{Handler: p}
	served := make(chan struct{})
	go func() { front.Serve(ln); close(served) }()
	defer func() { front.Close(); <-served }()

	fmt.Fprintf(w, "crashonce: %d server processes behind the transactional middleware on one PostgreSQL (table %s), a fault proxy (%.0f%% 503, %.0f%% responses lost), %d callers, %d keyed writes, a server killed about every %s\n\n",
		o.servers, o.table, 100*o.f503, 100*o.fLost, o.callers, o.calls, o.killEvery)
	stopKills := make(chan struct{})
	killsDone := make(chan error, 1)
	go func() { killsDone <- killLoop(s, o.killEvery, o.seed, stopKills) }()

	start := time.Now()
	out := runFleet("http://"+ln.Addr().String(), o.calls, o.callers, o.attempts)
	close(stopKills)
	if err := <-killsDone; err != nil {
		return counts{}, err
	}
	elapsed := time.Since(start)
	settled := settle(s, o.calls)
	c, err := count(ctx, db, o.table, o.calls)
	if err != nil {
		return counts{}, err
	}
	report(w, out, settled, c, s.kills, p, elapsed)
	return c, nil
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

// runFleet sends calls keyed writes through url from callers goroutines,
// each with a retryfuse Transport told that the servers honour keys, and
// counts how each call ended for its caller.
func runFleet(url string, calls, callers, attempts int) map[string]int {
	client := &http.Client{Transport: &retryfuse.Transport{
		MaxAttempts: attempts, AttemptTimeout: 5 * time.Second, Budget: retryfuse.UnlimitedBudget(), ServerHonoursKeys: true,
	}}
	defer client.CloseIdleConnections()
	var (
		mu   sync.Mutex
		out  = map[string]int{}
		next = make(chan int)
		wg   sync.WaitGroup
	)
	for range callers {
		wg.Go(func() {
			for i := range next {
				o := call(client, url, i)
				mu.Lock()
				out[o]++
				mu.Unlock()
			}
		})
	}
	for i := range calls {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// call sends keyed write i and names how it ended.
func call(client *http.Client, url string, i int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/effects", strings.NewReader(`{"n":`+strconv.Itoa(i)+`}`))
	req.Header.Set("Idempotency-Key", keyOf(i))
	resp, err := client.Do(req)
	var rec *retryfuse.ReconcileRequiredError
	switch {
	case errors.As(err, &rec):
		return "reconcile required"
	case err != nil:
		return "error: " + retryfuse.ReasonName(err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.Header.Get(idempotency.HeaderReplayed) == "true" {
		return strconv.Itoa(resp.StatusCode) + " replayed"
	}
	return strconv.Itoa(resp.StatusCode)
}

// settle sends every key once more, straight to a server, until it is
// answered 201 (run now, or replayed): a key whose call failed for its
// caller is then applied once, never twice.
func settle(s *servers, calls int) map[string]int {
	out := map[string]int{}
	r := rand.New(rand.NewPCG(3, 3))
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	for i := range calls {
		got := "unsettled"
		for try := 0; try < 50; try++ {
			req, _ := http.NewRequest(http.MethodPost, "http://"+s.pick(r)+"/effects", strings.NewReader(`{"n":`+strconv.Itoa(i)+`}`))
			req.Header.Set("Idempotency-Key", keyOf(i))
			resp, err := client.Do(req)
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusCreated {
				got = "ran now"
				if resp.Header.Get(idempotency.HeaderReplayed) == "true" {
					got = "replayed"
				}
				break
			}
			time.Sleep(100 * time.Millisecond) // 409 in flight: a killed server's transaction not yet ended
		}
		out[got]++
	}
	return out
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "crashonce:", err)
	os.Exit(1)
}
