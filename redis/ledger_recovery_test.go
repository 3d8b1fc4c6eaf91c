package retryfuseredis

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/ledger"
)

// These tests pin what the ledger does about steps Redis could not take:
// results retried in the background and flushed by Close, and the claims
// of failed Begins cancelled.

// pausedLedger returns a ledger of a Redis of the test's own, with a
// connection in its pool (so that a pause meets a read, not a dial).
func pausedLedger(t *testing.T, cfg LedgerConfig) (*Ledger, *server) {
	t.Helper()
	s := startServer(t)
	c := newClient(t, s.Addr())
	if err := c.Ping(bg()).Err(); err != nil {
		t.Fatal(err)
	}
	cfg.AllowWithoutPersistence = true
	if cfg.Timeout == 0 {
		cfg.Timeout = 100 * time.Millisecond
	}
	l, err := NewLedger(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	closeLedger(t, l)
	return l, s
}

// unrecordedLog collects OnUnrecorded reports.
type unrecordedLog struct {
	mu   sync.Mutex
	keys []string
}

func (u *unrecordedLog) add(key string, _ error) {
	u.mu.Lock()
	u.keys = append(u.keys, key)
	u.mu.Unlock()
}

func (u *unrecordedLog) get() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.keys...)
}

// waitState polls Begin on key (at most 10s) until it answers want;
// meanwhile it may answer only one of the states in allowed.
func waitState(t *testing.T, l *Ledger, key string, want decide.KeyState, allowed ...decide.KeyState) ledger.Claim {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cl, err := l.Begin(bg(), key, fpA)
		if err == nil && cl.State == want {
			return cl
		}
		if err == nil {
			ok := false
			for _, a := range allowed {
				ok = ok || cl.State == a
			}
			if !ok {
				t.Fatalf("Begin(%q): got %v (uncertain %v), want %v or one of %v", key, cl.State, cl.Uncertain, want, allowed)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Begin(%q) not %v after 10s (last: %v, %v)", key, want, cl.State, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A Complete that Redis could not take while paused is recorded once it
// answers again: the key is never free meanwhile, and ends completed
// with its result.
func TestLedgerResultRecordedAfterPause(t *testing.T) {
	l, s := pausedLedger(t, LedgerConfig{})
	res := &ledger.StoredResponse{StatusCode: 201, Header: http.Header{"X-Id": {"7"}}, Body: []byte("charged")}
	done := begin(t, l, "done", fpA)
	unsure := begin(t, l, "unsure", fpA)
	s.Pause()
	if err := l.Complete(bg(), "done", done.Token, res); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Complete with Redis paused: got %v, want ErrUnavailable", err)
	}
	if err := l.Uncertain(bg(), "unsure", unsure.Token); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Uncertain with Redis paused: got %v, want ErrUnavailable", err)
	}
	s.Resume()
	cl := waitState(t, l, "done", decide.KeyCompleted, decide.KeyInFlight)
	if cl.Stored == nil || string(cl.Stored.Body) != "charged" || cl.Stored.Header.Get("X-Id") != "7" {
		t.Fatalf("completed after the pause: got stored %+v, want the result", cl.Stored)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		cl := begin(t, l, "unsure", fpA)
		wantState(t, cl, decide.KeyInFlight, cl.Uncertain)
		if cl.Uncertain {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Uncertain not recorded 10s after the pause")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Close flushes what is queued within its deadline: here Redis answers
// again while Close waits.
func TestLedgerCloseFlushes(t *testing.T) {
	l, s := pausedLedger(t, LedgerConfig{})
	cl := begin(t, l, "k", fpA)
	s.Pause()
	if err := l.Complete(bg(), "k", cl.Token, nil); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Complete with Redis paused: got %v, want ErrUnavailable", err)
	}
	time.AfterFunc(300*time.Millisecond, s.Resume)
	ctx, cancel := context.WithTimeout(bg(), 10*time.Second)
	defer cancel()
	if err := l.Close(ctx); err != nil {
		t.Fatalf("Close: got %v, want nil: Redis answered before its deadline", err)
	}
	l2, err := NewLedger(newClient(t, s.Addr()), LedgerConfig{AllowWithoutPersistence: true, Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	closeLedger(t, l2)
	wantState(t, begin(t, l2, "k", fpA), decide.KeyCompleted, false)
}

// A full queue reports the step it cannot keep, at once.
func TestLedgerQueueBound(t *testing.T) {
	var u unrecordedLog
	l, s := pausedLedger(t, LedgerConfig{MaxPending: 2, OnUnrecorded: u.add})
	var tokens []string
	for _, k := range []string{"a", "b", "c"} {
		tokens = append(tokens, begin(t, l, k, fpA).Token)
	}
	s.Pause()
	for i, k := range []string{"a", "b", "c"} {
		if err := l.Complete(bg(), k, tokens[i], nil); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Complete(%s) with Redis paused: got %v, want ErrUnavailable", k, err)
		}
	}
	if got := u.get(); len(got) != 1 || got[0] != "c" {
		t.Fatalf("unrecorded with a queue of 2: got %q, want [c]", got)
	}
	s.Resume()
	waitState(t, l, "b", decide.KeyCompleted, decide.KeyInFlight)
	waitState(t, l, "a", decide.KeyCompleted, decide.KeyInFlight)
	wantState(t, begin(t, l, "c", fpA), decide.KeyInFlight, false) // held, never free
}

// A Begin that timed out while Redis was paused runs when Redis resumes:
// its claim blocks nobody. The same process takes it over at once; another
// process finds the key free once the cancellation has landed, never
// uncertain.
func TestLedgerFailedBeginBlocksNobody(t *testing.T) {
	l, s := pausedLedger(t, LedgerConfig{InFlightTTL: time.Minute})
	other, err := NewLedger(newClient(t, s.Addr()), LedgerConfig{AllowWithoutPersistence: true, Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	closeLedger(t, other)
	s.Pause()
	for _, k := range []string{"same", "other"} {
		if _, err := l.Begin(bg(), k, fpA); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Begin(%s) with Redis paused: got %v, want ErrUnavailable", k, err)
		}
	}
	s.Resume()
	cl := begin(t, l, "same", fpB) // the caller's next try, even with another body
	wantState(t, cl, decide.KeyNone, false)
	if err := l.Release(bg(), "same", cl.Token); err != nil {
		t.Fatal(err)
	}
	cl = waitState(t, other, "other", decide.KeyNone, decide.KeyInFlight)
	if err := other.Release(bg(), "other", cl.Token); err != nil {
		t.Fatal(err)
	}
}

// The cancellation and the Begin it cancels may reach Redis in either
// order: a cancellation that comes first leaves a mark that stops the
// Begin, and lets any other token claim the key.
func TestLedgerCancelBeforeBegin(t *testing.T) {
	l := newTestLedger(t, LedgerConfig{})
	if err := l.endOnce(bg(), "k", "late", opCancel, nil); err != nil {
		t.Fatal(err)
	}
	beginWith := func(token string) int64 {
		reply, err := l.guarded(bg(), ledgerBeginScript, "k", bucketOf("k"), string(fpA[:]), token, l.flightMillis, l.lifeMillis, "")
		if err != nil {
			t.Fatal(err)
		}
		return reply[0].(int64)
	}
	if code := beginWith("late"); code != 5 {
		t.Fatalf("the cancelled Begin, arriving late: got code %d, want 5 (cancelled, no claim)", code)
	}
	if code := beginWith("fresh"); code != 0 {
		t.Fatalf("another token after a cancellation: got code %d, want 0 (claimed)", code)
	}
	if code := beginWith("late"); code != 1 {
		t.Fatalf("the cancelled Begin after another claim: got code %d, want 1 (in flight)", code)
	}
	if err := l.endOnce(bg(), "k", "late", opCancel, nil); err != nil {
		t.Fatal(err)
	}
	if code := beginWith("other"); code != 1 {
		t.Fatalf("a cancellation of a token that does not hold the key: got code %d, want 1 (still in flight)", code)
	}
}

// A Complete sent while Redis is down (killed: it never runs) is recorded
// once Redis is back with its data (AOF, fsync always).
func TestLedgerResultRecordedAfterRestartWithAOF(t *testing.T) {
	p := startRedis(t, aofAlways...)
	l, err := NewLedger(newClient(t, p.Addr()), LedgerConfig{Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	closeLedger(t, l)
	cl := begin(t, l, "k", fpA)
	p.Stop()
	if err := l.Complete(bg(), "k", cl.Token, &ledger.StoredResponse{StatusCode: 201, Body: []byte("charged")}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Complete with Redis down: got %v, want ErrUnavailable", err)
	}
	p.Start()
	got := waitState(t, l, "k", decide.KeyCompleted, decide.KeyInFlight)
	if got.Stored == nil || string(got.Stored.Body) != "charged" {
		t.Fatalf("completed after the restart: got stored %+v, want the result", got.Stored)
	}
}
