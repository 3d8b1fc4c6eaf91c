package retryfusesql_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/retryfuse/retryfuse/idempotency"
	retryfusesql "github.com/retryfuse/retryfuse/sql"
	_ "modernc.org/sqlite"
)

// The transactional mode on SQLite: the charge, the key's claim and the
// recorded response commit together; a repeat under the key is answered
// with the stored response, and the charge is written once.
func Example_transactional() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	defer db.Close()
	ctx := context.Background()
	db.ExecContext(ctx, "CREATE TABLE charges (amount TEXT)")

	ledger, err := retryfusesql.NewLedger(ctx, db, retryfusesql.LedgerConfig{Dialect: retryfusesql.SQLite})
	if err != nil {
		fmt.Println(err)
		return
	}
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		amount, _ := io.ReadAll(r.Body)
		tx := idempotency.Tx(r.Context()) // the request's transaction
		if _, err := tx.ExecContext(r.Context(), "INSERT INTO charges (amount) VALUES (?)", string(amount)); err != nil {
			http.Error(w, "could not charge", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charged %s", amount)
	})
	h, _ := idempotency.New(charge, idempotency.Config{Ledger: ledger.Transactional()})
	srv := httptest.NewServer(h)
	defer srv.Close()

	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader("10 EUR"))
		req.Header.Set("Idempotency-Key", "order-7")
		resp, err := srv.Client().Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d %q replayed=%q\n", resp.StatusCode, body, resp.Header.Get(idempotency.HeaderReplayed))
	}
	var n int
	db.QueryRowContext(ctx, "SELECT COUNT(*) FROM charges").Scan(&n)
	fmt.Println("charges:", n)
	// Output:
	// 201 "charged 10 EUR" replayed=""
	// 201 "charged 10 EUR" replayed="true"
	// charges: 1
}
