package retryfuseredis

import (
	"context"
	"strconv"
	"testing"

	"github.com/retryfuse/retryfuse/ledger"
)

// The cost of answering "how many keys are stuck, which, since when" on
// 10,000 keys of a ledger, 1,000 of them uncertain: every page of List
// (SCAN COUNT 500 and a pipeline of reads), as "retryfuse keys list
// --state uncertain" reads them. On a server shared with other tests SCAN
// walks their keys too.
//
//	cd redis && REDIS_ADDR=127.0.0.1:6379 go test -run '^$' -bench ListStuck -benchmem
func BenchmarkListStuck(b *testing.B) {
	l, err := NewLedger(sharedClient(b), LedgerConfig{Prefix: uniq(b), Timeout: testTimeout, AllowWithoutPersistence: true})
	if err != nil {
		b.Fatal(err)
	}
	closeLedger(b, l)
	c := context.Background()
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
