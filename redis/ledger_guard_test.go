package retryfuseredis

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/ledger"
)

// These tests pin how the ledger notices that Redis lost its records and
// the quarantine that follows. Deleting the markers and records of a
// prefix is what a Redis restarted without persistence shows the ledger;
// TestLedgerRestartWithoutPersistence (ledger_fault_test.go) does it for
// real.

func wipe(t *testing.T, c redis.Cmdable, prefix string) {
	t.Helper()
	keys, err := c.Keys(bg(), prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		c.Del(bg(), keys...)
	}
}

func wantLost(t *testing.T, l *Ledger, key string) {
	t.Helper()
	_, err := l.Begin(bg(), key, fpA)
	if !errors.Is(err, ErrDataLost) || !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("Begin(%q) after lost data: got %v, want an error wrapping ErrDataLost and ledger.ErrUnavailable", key, err)
	}
}

// waitFree polls Begin on key (at most 10s) while it answers ErrDataLost,
// until the quarantine ends and it claims the key.
func waitFree(t *testing.T, l *Ledger, key string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cl, err := l.Begin(bg(), key, fpA)
		if err == nil {
			wantState(t, cl, decide.KeyNone, false)
			if err := l.Release(bg(), key, cl.Token); err != nil {
				t.Fatal(err)
			}
			return
		}
		if !errors.Is(err, ErrDataLost) || time.Now().After(deadline) {
			t.Fatalf("Begin(%q) after the quarantine: got %v, want a claim", key, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLedgerNoticesLostData(t *testing.T) {
	c := sharedClient(t)
	prefix := uniq(t)
	var reports atomic.Int64
	cfg := LedgerConfig{Prefix: prefix, Quarantine: 500 * time.Millisecond, OnDataLost: func(err error) {
		if !errors.Is(err, ErrDataLost) {
			t.Errorf("OnDataLost: got %v, want an error wrapping ErrDataLost", err)
		}
		reports.Add(1)
	}}
	l := newTestLedger(t, cfg)
	other := newTestLedger(t, LedgerConfig{Prefix: prefix})
	cl := begin(t, l, "k", fpA)
	if err := l.Complete(bg(), "k", cl.Token, nil); err != nil {
		t.Fatal(err)
	}

	wipe(t, c, prefix)
	wantLost(t, l, "k")
	wantLost(t, l, "another key")
	if n := reports.Load(); n != 1 {
		t.Fatalf("OnDataLost: called %d times, want once", n)
	}
	// The first to notice marks the loss for everyone: another process
	// that uses the marker, and one that starts now, are in quarantine too.
	wantLost(t, other, "k")
	late := newTestLedger(t, LedgerConfig{Prefix: prefix})
	wantLost(t, late, "k")

	waitFree(t, l, "k")
	waitFree(t, other, "k")
	waitFree(t, late, "k")
	if n := reports.Load(); n != 1 {
		t.Fatalf("OnDataLost: called %d times after the quarantine, want once", n)
	}
}

// A marker whose count went back (a snapshot restored, a failover to a
// replica that lagged) is lost data too.
func TestLedgerNoticesRollback(t *testing.T) {
	c := sharedClient(t)
	l := newTestLedger(t, LedgerConfig{})
	for range 3 {
		cl := begin(t, l, "k", fpA)
		if err := l.Release(bg(), "k", cl.Token); err != nil {
			t.Fatal(err)
		}
	}
	c.HSet(bg(), l.markerKey(bucketOf("k")), "n", 1)
	wantLost(t, l, "k")
}

// A process that starts on an empty Redis makes new markers: it cannot
// know what was lost. Those already running can, and put every process in
// quarantine, the new one included.
func TestLedgerFreshMarkersAreLostData(t *testing.T) {
	c := sharedClient(t)
	prefix := uniq(t)
	l := newTestLedger(t, LedgerConfig{Prefix: prefix})
	begin(t, l, "k", fpA)
	wipe(t, c, prefix)
	fresh := newTestLedger(t, LedgerConfig{Prefix: prefix})
	wantState(t, begin(t, fresh, "k2", fpA), decide.KeyNone, false) // cannot know
	wantLost(t, l, "k2")
	wantLost(t, fresh, "k2")
}

// A claim ended on lost data says so, and the ledger is in quarantine.
func TestLedgerEndOnLostData(t *testing.T) {
	c := sharedClient(t)
	prefix := uniq(t)
	l := newTestLedger(t, LedgerConfig{Prefix: prefix})
	cl := begin(t, l, "k", fpA)
	wipe(t, c, prefix)
	if err := l.Complete(bg(), "k", cl.Token, nil); !errors.Is(err, ErrDataLost) {
		t.Fatalf("Complete on lost data: got %v, want an error wrapping ErrDataLost", err)
	}
	wantLost(t, l, "k")
}

func TestLedgerChecksPersistence(t *testing.T) {
	volatile := startServer(t)
	_, err := NewLedger(newClient(t, volatile.Addr()), LedgerConfig{})
	if !errors.Is(err, retryfuse.ErrInvalidPolicy) {
		t.Fatalf("NewLedger on a Redis without AOF: got %v, want an error wrapping ErrInvalidPolicy", err)
	}
	for name, args := range map[string][]string{
		"appendonly yes":       aofAlways,
		"CONFIG not permitted": {"--rename-command", "CONFIG", ""},
	} {
		s := startRedis(t, args...)
		l, err := NewLedger(newClient(t, s.Addr()), LedgerConfig{})
		if err != nil {
			t.Fatalf("NewLedger, %s: got %v, want it accepted", name, err)
		}
		closeLedger(t, l)
	}
}
