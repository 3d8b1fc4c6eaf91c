package fleet

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse/idempotency"
	retryfuseredis "github.com/retryfuse/retryfuse/redis"
)

// This file is one server process: a small API behind the idempotency
// middleware on a Redis ledger, which appends every effect it applies to
// its effects file.

// The server's routes.
const (
	pathCharges = "/charges" // POST under an Idempotency-Key: applies a charge, once per key
	pathNotes   = "/notes"   // POST without a key: applies a note on every arrival
)

// ServerStats is what a server process reports when it stops, as one JSON
// line on its standard output.
type ServerStats struct {
	Applied       int64  `json:"applied"`        // effects it applied (keyed and not)
	BeginFailed   int64  `json:"begin_failed"`   // keyed requests answered 503: the ledger could not claim the key
	RecordFailed  int64  `json:"record_failed"`  // handlers' outcomes the ledger could not record at once (queued, retried)
	Unrecorded    int64  `json:"unrecorded"`     // steps the ledger gave up (OnUnrecorded)
	DataLost      int64  `json:"data_lost"`      // losses of Redis data the ledger noticed (OnDataLost)
	CloseErr      string `json:"close_err"`      // the ledger's Close, flushing what it could not record
	ListenAddress string `json:"listen_address"` // where it listened
}

// Serve runs one server process with the flags in args: it listens on
// 127.0.0.1, writes "listening ADDR" on stdout, serves until stdin ends,
// then shuts down, closes its ledger (which flushes the steps not yet
// recorded) and writes its ServerStats on stdout. It returns the process's
// exit code.
func Serve(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("redis", "", "Redis address")
	prefix := fs.String("prefix", "", "the ledger's key prefix")
	effects := fs.String("effects", "", "the file the server appends its effects to")
	timeout := fs.Duration("ledger-timeout", 0, "LedgerConfig.Timeout (0: the default)")
	bare := fs.Bool("bare", false, "serve the API without the Idempotency-Key middleware")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := serve(*addr, *prefix, *effects, *timeout, *bare, stdin, stdout); err != nil {
		fmt.Fprintln(stderr, "fleet server:", err)
		return 1
	}
	return 0
}

func serve(addr, prefix, effectsPath string, timeout time.Duration, bare bool, stdin io.Reader, stdout io.Writer) error {
	redis.SetLogger(quietLogger{}) // go-redis logs every failed dial: Redis is killed on purpose
	eff, err := os.OpenFile(effectsPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer eff.Close()
	var st ServerStats
	var applied, unrecorded, lost atomic.Int64
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	ledger, err := retryfuseredis.NewLedger(rdb, retryfuseredis.LedgerConfig{
		Prefix:       prefix,
		Timeout:      timeout,
		OnUnrecorded: func(string, error) { unrecorded.Add(1) },
		OnDataLost:   func(error) { lost.Add(1) },
	})
	if err != nil {
		return err
	}
	var logged ledgerLog
	var h http.Handler = newAPI(eff, &applied) // bare: keys not honoured
	if !bare {
		if h, err = idempotency.New(h, idempotency.Config{
			Ledger:      ledger,
			KeyOptional: true, // POST /notes goes without a key, as it is
			ErrorLog:    log.New(&logged, "", 0),
		}); err != nil {
			return err
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	st.ListenAddress = l.Addr().String()
	srv := &http.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	fmt.Fprintln(stdout, "listening", st.ListenAddress)

	_, _ = io.Copy(io.Discard, stdin) // until the parent closes it, or dies
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	shutErr := srv.Shutdown(ctx)
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	if err := ledger.Close(ctx); err != nil {
		st.CloseErr = err.Error()
	}
	st.BeginFailed, st.RecordFailed = logged.begin.Load(), logged.record.Load()
	st.Applied, st.Unrecorded, st.DataLost = applied.Load(), unrecorded.Load(), lost.Load()
	if err := json.NewEncoder(stdout).Encode(st); err != nil {
		return err
	}
	return shutErr
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// ledgerLog counts the middleware's reports of the ledger's failures.
type ledgerLog struct{ begin, record atomic.Int64 }

func (l *ledgerLog) Write(p []byte) (int, error) {
	if strings.Contains(string(p), "could not claim") {
		l.begin.Add(1)
	} else {
		l.record.Add(1)
	}
	return len(p), nil
}

// newAPI is the handler behind the middleware. A keyed charge appends
// "k KEY" to the effects file, a note "u ID" (its body), each line in one
// write to a file opened for appending, before it answers: the record of
// what was applied, and how often.
func newAPI(eff *os.File, applied *atomic.Int64) http.Handler {
	var mu sync.Mutex
	apply := func(w http.ResponseWriter, line string) bool {
		mu.Lock()
		_, err := eff.WriteString(line + "\n")
		mu.Unlock()
		if err != nil {
			http.Error(w, "effect not recorded: "+err.Error(), http.StatusInternalServerError)
			return false
		}
		applied.Add(1)
		return true
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+pathCharges, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		key := r.Header.Get("Idempotency-Key")
		if key == "" || strings.ContainsAny(key, "\n ") {
			http.Error(w, "a charge needs an Idempotency-Key", http.StatusBadRequest)
			return
		}
		if !apply(w, "k "+key) {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q,"charged":%d}`, key, len(body))
	})
	mux.HandleFunc("POST "+pathNotes, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id := string(body)
		if id == "" || strings.ContainsAny(id, "\n ") {
			http.Error(w, "a note is its id", http.StatusBadRequest)
			return
		}
		if !apply(w, "u "+id) {
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"note":%q}`, id)
	})
	mux.HandleFunc("GET "+pathCharges+"/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":%q,"status":"settled"}`, r.PathValue("id"))
	})
	return mux
}

// readEffects counts the effects recorded in the files at paths, by line.
func readEffects(paths []string) (map[string]int, error) {
	n := map[string]int{}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			n[sc.Text()]++
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	return n, nil
}
