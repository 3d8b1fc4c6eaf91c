package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/idempotency"
	"github.com/retryfuse/retryfuse/ledger"
	retryfuseredis "github.com/retryfuse/retryfuse/redis"
	retryfusesql "github.com/retryfuse/retryfuse/sql"
)

// serveOptions are a server process's settings, passed by crashonce on
// its command line after -serve.
type serveOptions struct {
	dsn, table string
	ledger     string // "sql" (the transactional mode) or "redis" (the ordinary mode)
	redis      string // the Redis address, with -ledger redis
	downstream string // the downstream API's URL; empty: no foreign call
	flightTTL  time.Duration
}

// args is o as serveFlags reads it.
func (o serveOptions) args() []string {
	return []string{"-serve", "-dsn", o.dsn, "-table", o.table, "-ledger", o.ledger, "-redis", o.redis,
		"-downstream", o.downstream, "-flight-ttl", o.flightTTL.String()}
}

// serveFlags defines the flags of a server process on fs.
func serveFlags(fs *flag.FlagSet, o *serveOptions) {
	fs.StringVar(&o.dsn, "dsn", "", "the PostgreSQL database")
	fs.StringVar(&o.table, "table", "", "the ledger's table and the effects' (table_effects); the prefix of the Redis ledger's keys")
	fs.StringVar(&o.ledger, "ledger", "sql", "sql (the transactional mode on PostgreSQL) or redis (the ordinary mode)")
	fs.StringVar(&o.redis, "redis", "", "the Redis address, with -ledger redis")
	fs.StringVar(&o.downstream, "downstream", "", "the downstream API's URL; empty: no foreign call")
	fs.DurationVar(&o.flightTTL, "flight-ttl", 0, "the ledger's InFlightTTL (0: its default)")
}

// serve is a server process: the middleware on the ledger (the
// transactional mode on PostgreSQL, or the ordinary mode on Redis), in
// front of a handler that writes its effect (one row of the effects
// table), in the request's transaction when there is one. With a
// downstream it first makes one foreign call there under the key of the
// step "charge". It prints the address it listens on, and serves until
// it is killed.
func serve(o serveOptions) int {
	if err := serveErr(o); err != nil {
		fmt.Fprintln(os.Stderr, "crashonce -serve:", err)
		return 1
	}
	return 0
}

func serveErr(o serveOptions) error {
	db, err := sql.Open("pgx", o.dsn)
	if err != nil {
		return err
	}
	db.SetMaxOpenConns(16)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ledger ledger.Ledger
	switch o.ledger {
	case "sql":
		l, err := retryfusesql.NewLedger(ctx, db, retryfusesql.LedgerConfig{Dialect: retryfusesql.Postgres, Table: o.table, InFlightTTL: o.flightTTL})
		if err != nil {
			return err
		}
		ledger = l.Transactional()
	case "redis":
		rdb := redis.NewClient(&redis.Options{Addr: o.redis, ContextTimeoutEnabled: true})
		l, err := retryfuseredis.NewLedger(rdb, retryfuseredis.LedgerConfig{Prefix: o.table + ":", InFlightTTL: o.flightTTL})
		if err != nil {
			return err
		}
		ledger = l
	default:
		return fmt.Errorf("unknown ledger %q", o.ledger)
	}
	insert := "INSERT INTO " + o.table + "_effects (idem, pid) VALUES ($1, $2)"
	pid := os.Getpid()
	down := &http.Client{Transport: &retryfuse.Transport{Keys: retryfuse.KeyPolicy{ServerHonours: true}, Retry: retryfuse.RetryPolicy{AttemptTimeout: 5 * time.Second}}}
	effect := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		key := r.Header.Get("Idempotency-Key")
		if o.downstream != "" {
			if err := charge(r.Context(), down, o.downstream, key); err != nil {
				// Nothing of this run is kept: the key is free again, and the
				// client's retry runs the handler again, which sends the
				// charge again under the same step key.
				idempotency.Release(w)
				w.Header().Set("Retry-After", "0")
				http.Error(w, "charge: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		var err error
		if tx := idempotency.Tx(r.Context()); tx != nil {
			_, err = tx.ExecContext(r.Context(), insert, key, pid)
		} else {
			_, err = db.ExecContext(r.Context(), insert, key, pid)
		}
		if err != nil {
			idempotency.Release(w)
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		// Widen the window between the effect and the commit (or the
		// record of the response), where a kill must leave nothing.
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		w.Header().Set("X-Pid", strconv.Itoa(pid))
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"applied":true}`)
	})
	h, err := idempotency.New(effect, idempotency.Config{Ledger: ledger, ErrorLog: log.New(io.Discard, "", 0)})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String())
	srv := &http.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0), ReadHeaderTimeout: 10 * time.Second}
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// charge makes the handler's foreign call: a POST to the downstream API
// under the key of the request's step "charge", its body naming the
// request's own key (the downstream's record of what it charged for).
func charge(ctx context.Context, client *http.Client, url, key string) error {
	ctx, err := idempotency.Step(ctx, "charge")
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/charges", strings.NewReader(`{"for":`+strconv.Quote(key)+`}`))
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("downstream answered %d", resp.StatusCode)
	}
	return nil
}
