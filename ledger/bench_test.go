package ledger

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/retryfuse/retryfuse/decide"
)

func newBenchLedger(b *testing.B, maxEntries int) *Memory {
	l, err := newMemory(&Memory{MaxEntries: maxEntries})
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// Keys cycle through more names than the ledger holds, so that the ledger is
// full in steady state and every Begin also evicts the least recently used
// completed key.
func BenchmarkMemoryLedgerBeginComplete(b *testing.B) {
	const capacity = 1024
	l := newBenchLedger(b, capacity)
	keys := benchKeys(4 * capacity)
	res := &StoredResponse{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"ch_1"}`)}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		key := keys[i%len(keys)]
		i++
		c, err := l.Begin(ctx, key, Fingerprint{1})
		if err != nil || c.State != decide.KeyNone {
			b.Fatalf("Begin(%q): %v, state %s", key, err, c.State)
		}
		if err := l.Complete(ctx, key, c.Token, res); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMemoryLedgerBeginCompleteParallel(b *testing.B) {
	const capacity = 1024
	l := newBenchLedger(b, capacity)
	keys := benchKeys(4 * capacity)
	res := &StoredResponse{StatusCode: 200, Body: []byte(`{"id":"ch_1"}`)}
	ctx := context.Background()
	var next atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := keys[next.Add(1)%uint64(len(keys))]
			c, err := l.Begin(ctx, key, Fingerprint{1})
			if err != nil {
				b.Error(err)
				return
			}
			if c.State == decide.KeyNone {
				_ = l.Complete(ctx, key, c.Token, res)
			}
		}
	})
}

// A replay hands out a deep copy of the stored response (1 KiB body).
func BenchmarkMemoryLedgerBeginReplay(b *testing.B) {
	l := newBenchLedger(b, 0)
	ctx := context.Background()
	c, _ := l.Begin(ctx, "k", Fingerprint{1})
	_ = l.Complete(ctx, "k", c.Token, &StoredResponse{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: make([]byte, 1024)})
	b.ReportAllocs()
	for b.Loop() {
		if c, _ := l.Begin(ctx, "k", Fingerprint{1}); c.State != decide.KeyCompleted {
			b.Fatalf("got %s, want completed", c.State)
		}
	}
}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	return keys
}
