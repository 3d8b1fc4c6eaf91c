package retryfuseredis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/ledger"
)

// A ledger call given a context that has already ended sends nothing, and
// says so: Redis, up all along, is not blamed. A step so refused is sent
// from the background at once.

// endedContext returns a context whose deadline has passed.
func endedContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(bg(), 0)
	t.Cleanup(cancel)
	return ctx
}

func TestLedgerStepWithEndedContextBlamesTheContext(t *testing.T) {
	l := newTestLedger(t, LedgerConfig{})
	for _, tc := range []struct {
		name      string
		step      func(ctx context.Context, key, token string) error
		state     decide.KeyState // what Begin finds once the step is recorded
		uncertain bool
	}{
		{"Release", l.Release, decide.KeyNone, false},
		{"Uncertain", l.Uncertain, decide.KeyInFlight, true},
		{"Complete", func(ctx context.Context, key, token string) error {
			return l.Complete(ctx, key, token, &ledger.StoredResponse{StatusCode: 201, Body: []byte("charged")})
		}, decide.KeyCompleted, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "k-" + tc.name
			cl := begin(t, l, key, fpA)
			err := tc.step(endedContext(t), key, cl.Token)
			want := "retryfuseredis: ledger " + tc.name + " not recorded: the caller's context ended (context deadline exceeded); retried in the background"
			if err == nil || err.Error() != want {
				t.Fatalf("%s with an ended context: got %v, want %q", tc.name, err, want)
			}
			if !errors.Is(err, ErrContextEnded) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) {
				t.Fatalf("%s with an ended context: got %v, want an error wrapping ErrContextEnded and context.DeadlineExceeded, not ErrUnavailable", tc.name, err)
			}
			got := waitState(t, l, key, tc.state, decide.KeyInFlight)
			for deadline := time.Now().Add(10 * time.Second); got.Uncertain != tc.uncertain; got = begin(t, l, key, fpA) {
				wantState(t, got, decide.KeyInFlight, got.Uncertain)
				if time.Now().After(deadline) {
					t.Fatalf("%s not recorded after 10s", tc.name)
				}
				time.Sleep(5 * time.Millisecond)
			}
			if tc.state == decide.KeyNone {
				if err := l.Release(bg(), key, got.Token); err != nil {
					t.Fatal(err)
				}
			}
		})
	}

	// Begin sends nothing, so there is no claim to cancel: the key is free.
	cause := errors.New("the caller gave up")
	ctx, cancel := context.WithCancelCause(bg())
	cancel(cause)
	_, err := l.Begin(ctx, "b", fpA)
	want := "retryfuseredis: ledger Begin not sent: the caller's context ended (context canceled: the caller gave up)"
	if err == nil || err.Error() != want || !errors.Is(err, ErrContextEnded) || !errors.Is(err, context.Canceled) || !errors.Is(err, cause) {
		t.Fatalf("Begin with a cancelled context: got %v, want %q wrapping ErrContextEnded, context.Canceled and the cause", err, want)
	}
	if token := l.pending.cancelled("b"); token != "" {
		t.Fatalf("after a Begin with a cancelled context: a cancellation of claim %q queued, want none", token)
	}
	wantState(t, begin(t, l, "b", fpA), decide.KeyNone, false)
}

// TestLedgerStepWithEndedContextSkipsTheBackoff: the queue is backing
// off (here for an hour) behind a step that Redis refuses; a step queued
// because its caller's context had ended is still sent at once.
func TestLedgerStepWithEndedContextSkipsTheBackoff(t *testing.T) {
	l := newTestLedger(t, LedgerConfig{})
	l.pending.minBackoff, l.pending.maxBackoff = time.Hour, time.Hour
	c := sharedClient(t)
	if err := c.Set(bg(), l.Key("refused"), "not a record", 0).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Del(bg(), l.Key("refused")) }) // before Close: the refused step then ends
	if err := l.Complete(bg(), "refused", "t", nil); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Complete on a record of the wrong type: got %v, want ErrUnavailable", err)
	}
	cl := begin(t, l, "k", fpA)
	if err := l.Release(endedContext(t), "k", cl.Token); !errors.Is(err, ErrContextEnded) {
		t.Fatalf("Release with an ended context: got %v, want ErrContextEnded", err)
	}
	start := time.Now()
	waitState(t, l, "k", decide.KeyNone, decide.KeyInFlight)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the Release was recorded after %v, want at once", d)
	}
}
