package retryfusesql

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/retryfuse/retryfuse/ledger"
)

// The cost of answering "how many keys are stuck, which, since when" on a
// table of 10,000 keys, 1,000 of them uncertain: every page of List, 500
// rows a page, as "retryfuse keys list --state uncertain" reads them.
//
//	cd sql && go test -run '^$' -bench ListStuck -benchmem
func BenchmarkListStuck(b *testing.B) {
	db := openDB(b, "sqlite", sqliteDSN(filepath.Join(b.TempDir(), "ledger.db")))
	c := context.Background()
	l, err := NewLedger(c, db, LedgerConfig{Dialect: SQLite})
	if err != nil {
		b.Fatal(err)
	}
	const keys, stuck = 10000, 1000
	for i := range keys {
		key := "order-" + strconv.Itoa(i)
		cl, err := l.Begin(c, key, ledger.Fingerprint{1})
		if err == nil && i%(keys/stuck) == 0 {
			err = l.Uncertain(c, key, cl.Token)
		} else if err == nil {
			err = l.Complete(c, key, cl.Token, nil)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		q, n := ledger.Query{State: ledger.StateUncertain, Limit: 500}, 0
		for {
			p, err := l.List(c, q)
			if err != nil {
				b.Fatal(err)
			}
			n += len(p.Keys)
			if p.Cursor == "" {
				break
			}
			q.Cursor = p.Cursor
		}
		if n != stuck {
			b.Fatalf("listed %d uncertain keys, want %d", n, stuck)
		}
	}
}
