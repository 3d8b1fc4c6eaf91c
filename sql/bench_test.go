package retryfusesql

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/idempotency"
)

// The cost of the transactional mode, over loopback: one keyed POST a
// request, answered 201 by a handler that writes one effect row, each
// under a new key, through a real HTTP server and a keep-alive client.
// The variants of a comparison run interleaved, one request of each in
// turn (their order rotated), in one benchmark run, and each reports its
// own time, allocations and bytes a request (client and server in this
// process, the database driver included); ratio is the middleware's time
// over its baseline's. Run with -benchmem -count N and take medians:
//
//	cd sql && PG_DSN=... go test -run '^$' -bench TxPOST -benchmem -count 5

// benchBody is the request's body.
var benchBody = []byte(`{"amount":4200,"currency":"EUR"}`)

// benchVariant is one way of serving the POST.
type benchVariant struct {
	name string
	h    http.Handler
}

// benchInterleaved sends one request to each variant in turn per
// iteration, and reports each variant's ns, allocations and bytes a
// request, and the ratio of the last variant's time to the first's.
func benchInterleaved(b *testing.B, variants []benchVariant) {
	type stat struct {
		ns, allocs, bytes uint64
		n                 int
	}
	urls := make([]string, len(variants))
	for i, v := range variants {
		srv := httptest.NewUnstartedServer(v.h)
		srv.Config.ErrorLog = log.New(io.Discard, "", 0)
		srv.Start()
		b.Cleanup(srv.Close)
		urls[i] = srv.URL
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}
	b.Cleanup(client.CloseIdleConnections)
	send := func(url, key string) {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/charges", bytes.NewReader(benchBody))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	run := rand.Text()[:8]
	for i := range variants { // a connection and a warm statement cache each
		send(urls[i], "warm-"+run+"-"+strconv.Itoa(i))
	}
	stats := make([]stat, len(variants))
	var m0, m1 runtime.MemStats
	i := 0
	for b.Loop() {
		for j := range variants {
			v := (i + j) % len(variants)
			key := run + "-" + strconv.Itoa(i) + "-" + strconv.Itoa(v)
			runtime.ReadMemStats(&m0)
			t0 := time.Now()
			send(urls[v], key)
			d := time.Since(t0)
			runtime.ReadMemStats(&m1)
			s := &stats[v]
			s.ns += uint64(d)
			s.allocs += m1.Mallocs - m0.Mallocs
			s.bytes += m1.TotalAlloc - m0.TotalAlloc
			s.n++
		}
		i++
	}
	for v, s := range stats {
		n := float64(s.n)
		b.ReportMetric(float64(s.ns)/n, variants[v].name+"-ns/req")
		b.ReportMetric(float64(s.allocs)/n, variants[v].name+"-allocs/req")
		b.ReportMetric(float64(s.bytes)/n, variants[v].name+"-B/req")
	}
	last := len(stats) - 1
	b.ReportMetric(float64(stats[last].ns)/float64(stats[0].ns), "ratio")
}

// benchEffects creates table (idem TEXT, amount INTEGER) on db.
func benchEffects(b *testing.B, db *sql.DB, d Dialect, table string) string {
	b.Helper()
	if _, err := db.Exec("CREATE TABLE " + table + " (idem TEXT NOT NULL, amount INTEGER NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + table) })
	return rebind(d, "INSERT INTO "+table+" (idem, amount) VALUES ($1, $2)")
}

// txEffect is the handler of the transactional mode: the effect in the
// request's transaction, 201 and a small JSON body.
func txEffect(insert string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if _, err := idempotency.Tx(r.Context()).ExecContext(r.Context(), insert, r.Header.Get("Idempotency-Key"), 4200); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"ch_1","amount":4200}`)
	})
}

// bareEffect writes the effect in a transaction of its own: no key.
func bareEffect(db *sql.DB, insert string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		tx, err := db.BeginTx(r.Context(), nil)
		if err == nil {
			if _, err = tx.ExecContext(r.Context(), insert, r.Header.Get("Idempotency-Key"), 4200); err == nil {
				err = tx.Commit()
			} else {
				_ = tx.Rollback()
			}
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"ch_1","amount":4200}`)
	})
}

// handKeyed is what a service writes without the middleware: in one
// transaction, an INSERT … ON CONFLICT DO NOTHING claim of the key
// (a conflict: a repeat, answered 409 here, the bench sends none), the
// effect, and an UPDATE recording the response; the same table and
// columns as the ledger's.
func handKeyed(db *sql.DB, d Dialect, keys, insert string) http.Handler {
	claim := rebind(d, "INSERT INTO "+keys+" (idem_key, fp, state, token, flight_ms, gone_ms, has_result) VALUES ($1, $2, 0, $3, $4, $5, 0) ON CONFLICT (idem_key) DO NOTHING RETURNING token")
	record := rebind(d, "UPDATE "+keys+" SET state = 2, token = '', flight_ms = 0, has_result = 1, status = $2, header = $3, body = $4 WHERE idem_key = $1 AND token = $5")
	body := []byte(`{"id":"ch_1","amount":4200}`)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, _ := io.ReadAll(r.Body)
		fp := sha256.Sum256(append([]byte(r.Method+" "+r.URL.EscapedPath()+"\n"), in...))
		key := r.Header.Get("Idempotency-Key")
		token := rand.Text()
		now := time.Now().UnixMilli()
		err := func() error {
			tx, err := db.BeginTx(r.Context(), nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			var got string
			if err := tx.QueryRowContext(r.Context(), claim, []byte(key), fp[:], token, now+60000, now+86460000).Scan(&got); err != nil {
				return err
			}
			if _, err := tx.ExecContext(r.Context(), insert, key, 4200); err != nil {
				return err
			}
			if _, err := tx.ExecContext(r.Context(), record, []byte(key), http.StatusCreated, `{"Content-Type":["application/json"]}`, body, token); err != nil {
				return err
			}
			return tx.Commit()
		}()
		if err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write(body)
	})
}

func benchMiddleware(b *testing.B, l *Ledger, next http.Handler) http.Handler {
	b.Helper()
	h, err := idempotency.New(next, idempotency.Config{Ledger: l.Transactional(), ErrorLog: log.New(io.Discard, "", 0)})
	if err != nil {
		b.Fatal(err)
	}
	return h
}

// BenchmarkTxPOSTPostgres: the transactional middleware against a
// hand-written keyed handler doing the same claim, effect and record in
// its own transaction, and the bare handler (the effect alone, no key)
// for reference; ratio is the middleware's time over the hand-written's.
func BenchmarkTxPOSTPostgres(b *testing.B) {
	dsn := os.Getenv("PG_DSN")
	if dsn == "" {
		b.Skip("PG_DSN is empty; scripts/sql-test shows how to start a PostgreSQL")
	}
	db := openDB(b, "pgx", dsn)
	db.SetMaxIdleConns(8)
	ctx := context.Background()
	mwTable, handTable := uniqTable(b), uniqTable(b)
	l, err := NewLedger(ctx, db, LedgerConfig{Dialect: Postgres, Table: mwTable})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := NewLedger(ctx, db, LedgerConfig{Dialect: Postgres, Table: handTable}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_, _ = db.Exec("DROP TABLE IF EXISTS " + mwTable + ", " + mwTable + "_schema, " + handTable + ", " + handTable + "_schema")
	})
	insert := benchEffects(b, db, Postgres, uniqTable(b))
	benchInterleaved(b, []benchVariant{
		{"hand", handKeyed(db, Postgres, handTable, insert)},
		{"bare", bareEffect(db, insert)},
		{"middleware", benchMiddleware(b, l, txEffect(insert))},
	})
}

// BenchmarkTxPOSTSQLiteMemory: on SQLite in memory (one connection), the
// transactional middleware against the bare handler (the effect in a
// transaction of its own, no key), and the hand-written keyed handler
// for reference; ratio is the middleware's time over the bare's.
func BenchmarkTxPOSTSQLiteMemory(b *testing.B) {
	db := openDB(b, "sqlite", "file:bench?mode=memory&_pragma=busy_timeout(10000)&_txlock=immediate")
	db.SetMaxOpenConns(1) // one in-memory database: every connection would have its own
	ctx := context.Background()
	l, err := NewLedger(ctx, db, LedgerConfig{Dialect: SQLite, Table: "mw_keys"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := NewLedger(ctx, db, LedgerConfig{Dialect: SQLite, Table: "hand_keys"}); err != nil {
		b.Fatal(err)
	}
	insert := benchEffects(b, db, SQLite, "effects")
	benchInterleaved(b, []benchVariant{
		{"bare", bareEffect(db, insert)},
		{"hand", handKeyed(db, SQLite, "hand_keys", insert)},
		{"middleware", benchMiddleware(b, l, txEffect(insert))},
	})
}
