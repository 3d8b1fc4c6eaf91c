package retryfuseredis

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/decide"
)

// Ending a quarantine deliberately: refused unless asked for explicitly,
// recorded on the markers, ended for every process that uses them, and
// never mistaken for the end of a loss that comes after it.

// endLog records the ends a process reports.
type endLog struct {
	mu   sync.Mutex
	ends []QuarantineEnd
}

func (e *endLog) hook(end QuarantineEnd) {
	e.mu.Lock()
	e.ends = append(e.ends, end)
	e.mu.Unlock()
}

func (e *endLog) all() []QuarantineEnd {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]QuarantineEnd(nil), e.ends...)
}

// quarantined returns a ledger of prefix in a quarantine of an hour, that
// looks at the markers on every Begin, and the log of its ends.
func quarantinedLedger(t *testing.T, prefix string) (*Ledger, *endLog) {
	t.Helper()
	log := &endLog{}
	l := newTestLedger(t, LedgerConfig{Prefix: prefix, Quarantine: time.Hour, OnQuarantineEnd: log.hook})
	l.guard.recheckEvery = 0
	return l, log
}

func wantClaim(t *testing.T, l *Ledger, key string) {
	t.Helper()
	cl, err := l.Begin(bg(), key, fpA)
	if err != nil {
		t.Fatalf("Begin(%q) after the quarantine was ended: %v", key, err)
	}
	wantState(t, cl, decide.KeyNone, false)
	if err := l.Release(bg(), key, cl.Token); err != nil {
		t.Fatal(err)
	}
}

const reconciledBy = "alice: orders 1-40 checked against the orders database"

func TestEndQuarantineRefusedUnlessAskedForExplicitly(t *testing.T) {
	c := sharedClient(t)
	prefix := uniq(t)
	l, log := quarantinedLedger(t, prefix)
	if err := l.EndQuarantine(bg(), QuarantineEnd{Reconciled: true, Reason: reconciledBy}); !errors.Is(err, ErrNoQuarantine) {
		t.Errorf("EndQuarantine out of quarantine: got %v, want ErrNoQuarantine", err)
	}
	begin(t, l, "k", fpA)
	wipe(t, c, prefix)
	wantLost(t, l, "k")
	for _, end := range []QuarantineEnd{
		{Reason: reconciledBy},
		{Reconciled: true},
		{Reconciled: true, Reason: "  \t"},
	} {
		if err := l.EndQuarantine(bg(), end); !errors.Is(err, ErrUnconfirmed) {
			t.Errorf("EndQuarantine(%+v): got %v, want ErrUnconfirmed", end, err)
		}
	}
	wantLost(t, l, "k")
	for b := range ledgerBuckets {
		if n := c.HExists(bg(), l.markerKey(b), "qe").Val(); n {
			t.Fatalf("marker %d: an end recorded by a refused EndQuarantine", b)
		}
	}
	if ends := log.all(); len(ends) != 0 {
		t.Errorf("OnQuarantineEnd: %+v, want nothing", ends)
	}
}

func TestEndQuarantineEndsItForEveryProcess(t *testing.T) {
	c := sharedClient(t)
	prefix := uniq(t)
	l, log := quarantinedLedger(t, prefix)
	other, otherLog := quarantinedLedger(t, prefix)
	quiet, _ := quarantinedLedger(t, prefix) // never meets the loss before the end
	begin(t, l, "k", fpA)
	begin(t, other, "k2", fpA)
	wipe(t, c, prefix)
	wantLost(t, l, "k")
	wantLost(t, other, "k")
	late, lateLog := quarantinedLedger(t, prefix) // starts during the quarantine
	wantLost(t, late, "k")

	start := time.Now()
	if err := l.EndQuarantine(bg(), QuarantineEnd{Reconciled: true, Reason: reconciledBy}); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]*Ledger{"the operator's": l, "another": other, "one started in quarantine": late, "one that never noticed": quiet} {
		t.Run(name, func(t *testing.T) {
			wantClaim(t, p, "k")
			wantClaim(t, p, "another key")
		})
	}
	for name, lg := range map[string]*endLog{"the operator's": log, "another": otherLog, "one started in quarantine": lateLog} {
		ends := lg.all()
		if len(ends) != 1 || ends[0].Reason != reconciledBy || !ends[0].Reconciled || ends[0].At.Before(start.Add(-time.Minute)) {
			t.Errorf("%s process: OnQuarantineEnd got %+v, want one end with the reason and its time", name, ends)
		}
	}
	for b := range ledgerBuckets {
		m := c.HGetAll(bg(), l.markerKey(b)).Val()
		if m["qr"] != reconciledBy || m["qe"] == "" {
			t.Fatalf("marker %d: %v, want the end and its reason recorded", b, m)
		}
	}
}

// A loss after the end is a loss: noticed, quarantined, reported.
func TestLossAfterAnEndIsQuarantinedAgain(t *testing.T) {
	c := sharedClient(t)
	prefix := uniq(t)
	var lost int
	var mu sync.Mutex
	l := newTestLedger(t, LedgerConfig{Prefix: prefix, Quarantine: time.Hour, OnDataLost: func(error) {
		mu.Lock()
		lost++
		mu.Unlock()
	}})
	l.guard.recheckEvery = 0
	begin(t, l, "k", fpA)
	wipe(t, c, prefix)
	wantLost(t, l, "k")
	if err := l.EndQuarantine(bg(), QuarantineEnd{Reconciled: true, Reason: reconciledBy}); err != nil {
		t.Fatal(err)
	}
	begin(t, l, "k", fpA)
	wipe(t, c, prefix)
	wantLost(t, l, "k")
	wantLost(t, l, "k") // it looks at the markers on every Begin: the old end does not count
	mu.Lock()
	defer mu.Unlock()
	if lost != 2 {
		t.Errorf("OnDataLost: called %d times, want twice", lost)
	}
}

// A process in quarantine that finds markers made afresh (Redis lost
// them again, and a process started on the empty Redis) stays in it:
// only a recorded end ends it early.
func TestQuarantineNotEndedByMarkersMadeAfresh(t *testing.T) {
	c := sharedClient(t)
	prefix := uniq(t)
	l, log := quarantinedLedger(t, prefix)
	begin(t, l, "k", fpA)
	wipe(t, c, prefix)
	wantLost(t, l, "k")
	wipe(t, c, prefix)
	newTestLedger(t, LedgerConfig{Prefix: prefix}) // makes every marker, without a quarantine
	wantLost(t, l, "k")
	if ends := log.all(); len(ends) != 0 {
		t.Errorf("OnQuarantineEnd: %+v, want nothing", ends)
	}
}

// Another process learns of the end when it next looks at the markers:
// at most once a second, by default.
func TestQuarantineEndLearntAtTheNextLook(t *testing.T) {
	c := sharedClient(t)
	prefix := uniq(t)
	l, _ := quarantinedLedger(t, prefix)
	other := newTestLedger(t, LedgerConfig{Prefix: prefix, Quarantine: time.Hour})
	other.guard.recheckEvery = time.Hour
	begin(t, other, "k", fpA)
	wipe(t, c, prefix)
	wantLost(t, other, "k")
	wantLost(t, other, "k") // its look, for the hour to come
	if err := l.EndQuarantine(bg(), QuarantineEnd{Reconciled: true, Reason: reconciledBy}); err != nil {
		t.Fatal(err)
	}
	wantLost(t, other, "k")
	other.guard.mu.Lock()
	other.guard.checked = time.Time{} // its next look is due
	other.guard.mu.Unlock()
	wantClaim(t, other, "k")
}

// On a cluster, the end reaches the markers of every master.
func TestEndQuarantineOnCluster(t *testing.T) {
	c := clusterClient(t)
	l := newClusterLedger(t, uniq(t))
	begin(t, l, "k", fpA)
	c.Del(bg(), l.Key("k"), l.markerKey(bucketOf("k")))
	wantLost(t, l, "k")
	if err := l.EndQuarantine(bg(), QuarantineEnd{Reconciled: true, Reason: reconciledBy}); err != nil {
		t.Fatal(err)
	}
	for b := range ledgerBuckets {
		if got := c.HGet(bg(), l.markerKey(b), "qr").Val(); got != reconciledBy {
			t.Fatalf("marker %d: reason %q, want the end recorded", b, got)
		}
	}
	wantClaim(t, l, "k")
}
