package ledgertest

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/ledger"
)

// This file checks ledger.Settler, for a ledger that implements it (and
// ledger.Inspector, which an operator needs to see the version).

func settler(t testing.TB, l ledger.Ledger) (ledger.Inspector, ledger.Settler, bool) {
	in, isInspector := l.(ledger.Inspector)
	st, isSettler := l.(ledger.Settler)
	if !isSettler {
		t.Log("the ledger does not implement ledger.Settler: not checked")
		return nil, nil, false
	}
	if !isInspector {
		t.Fatalf("the ledger implements ledger.Settler but not ledger.Inspector: an operator cannot see the version Settle needs")
	}
	return in, st, true
}

// wantRefused checks that err refuses a Settle and carries the key in
// state found.
func wantRefused(t testing.TB, err error, found ledger.State, what string) *ledger.SettleRefusedError {
	t.Helper()
	var r *ledger.SettleRefusedError
	if !errors.As(err, &r) || !errors.Is(err, ledger.ErrSettleRefused) {
		t.Fatalf("%s: got error %v, want a *ledger.SettleRefusedError wrapping ledger.ErrSettleRefused", what, err)
	}
	if r.Found.State != found {
		t.Fatalf("%s: refused with the key found %v, want %v", what, r.Found.State, found)
	}
	return r
}

func (s *suite) settle(t testing.TB) {
	l := s.ledger(t)
	in, st, isSettler := settler(t, l)
	if !isSettler {
		return
	}
	c := ctx(t)
	res := &ledger.StoredResponse{StatusCode: 201, Body: []byte(`{"id":"ch_1"}`)}

	// An uncertain key settled as applied: later calls are replayed, and
	// the owner's token no longer owns it.
	applied := s.key("settle-applied")
	tok := claim(t, l, applied)
	ok(t, l.Uncertain(c, applied, tok), "Uncertain")
	seen := lookup(t, in, applied)
	after, err := st.Settle(c, applied, seen.Version, ledger.Settlement{Outcome: ledger.Applied, Stored: res})
	ok(t, err, "Settle of an uncertain key as applied")
	if after.State != ledger.StateCompleted || !after.HasStored || after.StoredStatus != 201 || after.Version == seen.Version {
		t.Fatalf("Settle as applied with a 201: returned %+v, want completed with a stored 201 and a new version", after)
	}
	res.Body[0] = 'X' // the ledger kept a copy
	cl := begin(t, l, applied, fpA)
	want(t, cl, decide.KeyCompleted, false, "a repeat under a key settled as applied")
	if cl.Stored == nil || cl.Stored.StatusCode != 201 || !bytes.Equal(cl.Stored.Body, []byte(`{"id":"ch_1"}`)) {
		t.Fatalf("a repeat under a key settled as applied: replayed %+v, want the settled 201", cl.Stored)
	}
	wantErrToken(t, l.Release(c, applied, tok), "the owner's Release after its key was settled")
	wantRefused(t, settleErr(st, c, applied, seen.Version, ledger.NotApplied), ledger.StateCompleted, "a second Settle at the version seen before the first")

	// An uncertain key settled as not applied: free.
	freed := s.key("settle-not-applied")
	tok = claim(t, l, freed)
	ok(t, l.Uncertain(c, freed, tok), "Uncertain")
	after, err = st.Settle(c, freed, lookup(t, in, freed).Version, ledger.Settlement{Outcome: ledger.NotApplied})
	ok(t, err, "Settle of an uncertain key as not applied")
	if after.State != ledger.StateFree {
		t.Fatalf("Settle as not applied: returned state %v, want free", after.State)
	}
	wantErrToken(t, l.Complete(c, freed, tok, nil), "the owner's Complete after its key was settled")
	claim(t, l, freed)

	// A key in flight whose owner is gone, settled as applied without a
	// result: completed, nothing to replay.
	dead := s.key("settle-in-flight")
	tok = claim(t, l, dead)
	after, err = st.Settle(c, dead, lookup(t, in, dead).Version, ledger.Settlement{Outcome: ledger.Applied})
	ok(t, err, "Settle of a key in flight as applied")
	if after.State != ledger.StateCompleted || after.HasStored {
		t.Fatalf("Settle of a key in flight as applied without a result: returned %+v, want completed, nothing stored", after)
	}
	wantErrToken(t, l.Complete(c, dead, tok, nil), "the owner's Complete after its key was settled")
	cl = begin(t, l, dead, fpA)
	if cl.State != decide.KeyCompleted || cl.Stored != nil {
		t.Fatalf("a repeat under a key settled as applied without a result: got %v stored %+v, want completed, nothing to replay", cl.State, cl.Stored)
	}

	// The owner moved first: the version seen is stale.
	moved := s.key("settle-stale")
	tok = claim(t, l, moved)
	ok(t, l.Uncertain(c, moved, tok), "Uncertain")
	stale := lookup(t, in, moved)
	ok(t, l.Complete(c, moved, tok, nil), "the owner's Complete")
	r := wantRefused(t, settleErr(st, c, moved, stale.Version, ledger.NotApplied), ledger.StateCompleted, "Settle after the owner completed the key")
	if r.Found.Key != moved || r.Version != stale.Version {
		t.Fatalf("a refused Settle: found key %q, version given %q; want %q and %q", r.Found.Key, r.Version, moved, stale.Version)
	}
	want(t, begin(t, l, moved, fpA), decide.KeyCompleted, false, "after a refused Settle")

	// A version never given, a completed key, a free key: refused, unchanged.
	wrong := s.key("settle-wrong-version")
	ok(t, l.Uncertain(c, wrong, claim(t, l, wrong)), "Uncertain")
	v := lookup(t, in, wrong).Version
	wantRefused(t, settleErr(st, c, wrong, v+"x", ledger.NotApplied), ledger.StateUncertain, "Settle at a version the key never had")
	if again := lookup(t, in, wrong); again.Version != v || again.State != ledger.StateUncertain {
		t.Fatalf("after a refused Settle: got %v version %q, want uncertain at %q", again.State, again.Version, v)
	}
	wantRefused(t, settleErr(st, c, moved, lookup(t, in, moved).Version, ledger.NotApplied), ledger.StateCompleted, "Settle of a completed key at its version")
	wantRefused(t, settleErr(st, c, s.key("settle-free"), "", ledger.Applied), ledger.StateFree, "Settle of a free key")
}

func settleErr(st ledger.Settler, c context.Context, key, version string, o ledger.Outcome) error {
	_, err := st.Settle(c, key, version, ledger.Settlement{Outcome: o})
	return err
}

func (s *suite) settleRace(t testing.TB) {
	l := s.ledger(t)
	in, st, isSettler := settler(t, l)
	if !isSettler {
		return
	}
	c := ctx(t)
	for range 5 {
		key := s.key("settle-race")
		ok(t, l.Uncertain(c, key, claim(t, l, key)), "Uncertain")
		seen := lookup(t, in, key)
		outcomes := [2]ledger.Outcome{ledger.Applied, ledger.NotApplied}
		var errs [2]error
		var start, wg sync.WaitGroup
		start.Add(1)
		for i, o := range outcomes {
			wg.Go(func() {
				start.Wait()
				_, errs[i] = st.Settle(c, key, seen.Version, ledger.Settlement{Outcome: o})
			})
		}
		start.Done()
		wg.Wait()
		var won, lost int
		switch {
		case errs[0] == nil && errs[1] != nil:
			won, lost = 0, 1
		case errs[1] == nil && errs[0] != nil:
			won, lost = 1, 0
		default:
			t.Fatalf("two Settles of key %q at version %q, as applied and as not applied: errors %v and %v, want exactly one refused", key, seen.Version, errs[0], errs[1])
		}
		wantState := map[ledger.Outcome]ledger.State{ledger.Applied: ledger.StateCompleted, ledger.NotApplied: ledger.StateFree}[outcomes[won]]
		wantRefused(t, errs[lost], wantState, "the Settle that lost the race")
		if now := lookup(t, in, key); now.State != wantState {
			t.Fatalf("after the race, key %q is %v, want %v as the winner settled it", key, now.State, wantState)
		}
	}
}

func (s *suite) reap(t testing.TB) {
	l := s.ledger(t)
	in, st, isSettler := settler(t, l)
	if !isSettler {
		return
	}
	c := ctx(t)
	gone, held := s.key("reap-completed"), s.key("reap-lapsed")
	ok(t, l.Complete(c, gone, claim(t, l, gone), nil), "Complete")
	claim(t, l, held) // uncertain after InFlightTTL, for TTL
	s.waitUntil(s.now().Add(s.cfg.TTL + s.margin))
	n, err := st.Reap(c, 0)
	ok(t, err, "Reap")
	if n < 0 || n > 1 {
		t.Fatalf("Reap: deleted %d records, want at most the 1 whose time has passed", n)
	}
	if k := lookup(t, in, held); k.State != ledger.StateUncertain {
		t.Fatalf("after Reap, a claim that expired within its InFlightTTL + TTL is %v, want uncertain", k.State)
	}
	want(t, begin(t, l, held, fpA), decide.KeyInFlight, true, "after Reap, an expired claim")
	claim(t, l, gone)
}
