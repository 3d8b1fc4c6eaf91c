package ledgertest

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/sentinel"
	"github.com/retryfuse/retryfuse/ledger"
)

// This file checks ledger.Inspector, for a ledger that implements it.

// inspector returns l as an Inspector; ok false (logged) when it is not.
func inspector(t testing.TB, l ledger.Ledger) (ledger.Inspector, bool) {
	in, ok := l.(ledger.Inspector)
	if !ok {
		t.Log("the ledger does not implement ledger.Inspector: not checked")
	}
	return in, ok
}

func lookup(t testing.TB, in ledger.Inspector, key string) ledger.KeyInfo {
	t.Helper()
	k, err := in.Lookup(ctx(t), key)
	if err != nil {
		t.Fatalf("Lookup(%q): %v", key, err)
	}
	if k.Key != key {
		t.Fatalf("Lookup(%q): got KeyInfo.Key %q", key, k.Key)
	}
	return k
}

// wantInfo checks k's state and, for a key the ledger holds, its times:
// Since no later than Now, and Expires span after Since (within the
// suite's slack).
func (s *suite) wantInfo(t testing.TB, k ledger.KeyInfo, state ledger.State, span time.Duration, what string) {
	t.Helper()
	if k.State != state {
		t.Fatalf("%s: Lookup got state %v, want %v (%+v)", what, k.State, state, k)
	}
	if state == ledger.StateFree {
		if k.Version != "" || k.Fingerprint != (ledger.Fingerprint{}) || !k.Since.IsZero() {
			t.Fatalf("%s: Lookup of a free key got %+v, want no version, fingerprint or times", what, k)
		}
		return
	}
	if k.Fingerprint != fpA || k.Version == "" || k.Now.IsZero() {
		t.Fatalf("%s: Lookup got fingerprint %x version %q now %v, want fingerprint %x, a version and the time of the read", what, k.Fingerprint, k.Version, k.Now, fpA)
	}
	if k.Since.After(k.Now.Add(s.margin)) {
		t.Fatalf("%s: Lookup got Since %v after the time of the read %v", what, k.Since, k.Now)
	}
	if d := k.Expires.Sub(k.Since) - span; d < -s.margin || d > s.margin {
		t.Fatalf("%s: Lookup got Since %v and Expires %v, %v apart; want %v", what, k.Since, k.Expires, k.Expires.Sub(k.Since), span)
	}
}

// noToken fails when a string of k (but its Key) holds token.
func noToken(t testing.TB, k ledger.KeyInfo, token, what string) {
	t.Helper()
	v := reflect.ValueOf(k)
	for i := range v.NumField() {
		f, name := v.Field(i), v.Type().Field(i).Name
		if f.Kind() != reflect.String || name == "Key" || token == "" {
			continue
		}
		// A short token (a counter's) may be part of anything; a long one
		// (random bits) is never part of a string by chance.
		if f.String() == token || len(token) >= 8 && strings.Contains(f.String(), token) {
			t.Fatalf("%s: KeyInfo.%s %q holds the owner's token", what, name, f.String())
		}
	}
}

func (s *suite) lookup(t testing.TB) {
	l := s.ledger(t)
	in, isInspector := inspector(t, l)
	if !isInspector {
		return
	}
	c := ctx(t)
	key := s.key("lookup")
	s.wantInfo(t, lookup(t, in, key), ledger.StateFree, 0, "a key never used")
	tok := claim(t, l, key)
	k := lookup(t, in, key)
	s.wantInfo(t, k, ledger.StateInFlight, s.cfg.InFlightTTL, "a key in flight")
	noToken(t, k, tok, "a key in flight")
	if k.Age() > s.cfg.InFlightTTL {
		t.Fatalf("a key just claimed: Age %v, want less than InFlightTTL %v", k.Age(), s.cfg.InFlightTTL)
	}
	if again := lookup(t, in, key); again.Version != k.Version || again.State != k.State {
		t.Fatalf("a second Lookup: got %v version %q, want %v version %q (Lookup changes nothing)", again.State, again.Version, k.State, k.Version)
	}
	want(t, begin(t, l, key, fpA), decide.KeyInFlight, false, "after Lookup")

	ok(t, l.Uncertain(c, key, tok), "Uncertain")
	u := lookup(t, in, key)
	s.wantInfo(t, u, ledger.StateUncertain, s.cfg.TTL, "an uncertain key")
	noToken(t, u, tok, "an uncertain key")
	if u.Lapsed || u.Version == k.Version {
		t.Fatalf("an uncertain key: Lapsed %v version %q (in flight: %q); want not lapsed and a new version", u.Lapsed, u.Version, k.Version)
	}
	ok(t, l.Complete(c, key, tok, &ledger.StoredResponse{StatusCode: 202}), "Complete of the uncertain claim")
	d := lookup(t, in, key)
	s.wantInfo(t, d, ledger.StateCompleted, s.cfg.TTL, "a completed key")
	if !d.HasStored || d.StoredStatus != 202 || d.Version == u.Version {
		t.Fatalf("a key completed with a 202: HasStored %v StoredStatus %d version %q (uncertain: %q); want a stored 202 and a new version", d.HasStored, d.StoredStatus, d.Version, u.Version)
	}
	bare := s.key("lookup-bare")
	ok(t, l.Complete(c, bare, claim(t, l, bare), nil), "Complete without a result")
	if b := lookup(t, in, bare); b.State != ledger.StateCompleted || b.HasStored || b.StoredStatus != 0 {
		t.Fatalf("a key completed without a result: got %v HasStored %v StoredStatus %d, want completed, nothing stored", b.State, b.HasStored, b.StoredStatus)
	}

	lapsed := s.key("lookup-lapsed")
	claim(t, l, lapsed)
	before := lookup(t, in, lapsed)
	s.waitUntil(s.now().Add(s.cfg.InFlightTTL + s.margin))
	after := lookup(t, in, lapsed)
	s.wantInfo(t, after, ledger.StateUncertain, s.cfg.TTL, "a claim past its InFlightTTL")
	if !after.Lapsed || after.Version == before.Version {
		t.Fatalf("a claim past its InFlightTTL: Lapsed %v version %q (in flight: %q); want lapsed and a new version", after.Lapsed, after.Version, before.Version)
	}
	if d := after.Since.Sub(before.Expires); d < -s.margin || d > s.margin {
		t.Fatalf("a claim past its InFlightTTL: uncertain since %v, want the claim's expiry %v", after.Since, before.Expires)
	}
}

// listAll follows q's pages to the end and returns every key, checking
// each page's bound. (A store shared with other tests, such as a Redis
// whose SCAN covers every key, may take many pages.)
func listAll(t testing.TB, in ledger.Inspector, q ledger.Query) map[string]ledger.KeyInfo {
	t.Helper()
	got := map[string]ledger.KeyInfo{}
	seen := map[string]bool{}
	for {
		if seen[q.Cursor] {
			t.Fatalf("List: cursor %q given back a second time: the listing never ends", q.Cursor)
		}
		seen[q.Cursor] = true
		p, err := in.List(ctx(t), q)
		if err != nil {
			t.Fatalf("List(%+v): %v", q, err)
		}
		if q.Limit > 0 && len(p.Keys) > q.Limit {
			t.Fatalf("List with Limit %d: a page of %d keys", q.Limit, len(p.Keys))
		}
		for _, k := range p.Keys {
			got[k.Key] = k
		}
		if p.Cursor == "" {
			return got
		}
		q.Cursor = p.Cursor
	}
}

func (s *suite) list(t testing.TB) {
	l := s.ledger(t)
	in, isInspector := inspector(t, l)
	if !isInspector {
		return
	}
	c := ctx(t)
	if _, err := in.List(c, ledger.Query{Limit: ledger.MaxListLimit + 1}); !errors.Is(err, sentinel.ErrInvalidPolicy) {
		t.Fatalf("List with Limit %d: got error %v, want one wrapping ErrInvalidPolicy", ledger.MaxListLimit+1, err)
	}
	if _, err := in.List(c, ledger.Query{MinAge: -time.Second}); !errors.Is(err, sentinel.ErrInvalidPolicy) {
		t.Fatalf("List with a negative MinAge: got error %v, want one wrapping ErrInvalidPolicy", err)
	}
	want := map[string]ledger.State{}
	// Ages first: one key uncertain for age, one just now.
	old := s.key("list-old-uncertain")
	ok(t, l.Uncertain(c, old, claim(t, l, old)), "Uncertain")
	want[old] = ledger.StateUncertain
	age := s.cfg.InFlightTTL / 2
	s.waitUntil(s.now().Add(age))
	young := s.key("list-young-uncertain")
	ok(t, l.Uncertain(c, young, claim(t, l, young)), "Uncertain")
	want[young] = ledger.StateUncertain
	minAge := age - s.margin/2
	stuck := listAll(t, in, ledger.Query{State: ledger.StateUncertain, MinAge: minAge})
	if _, found := stuck[old]; len(stuck) != 1 || !found {
		t.Fatalf("List of keys uncertain for at least %v: got %d keys, want only %q", minAge, len(stuck), old)
	}

	for i := range 3 {
		k := s.key("list-in-flight")
		claim(t, l, k)
		want[k] = ledger.StateInFlight
		if i < 2 {
			k = s.key("list-completed")
			ok(t, l.Complete(c, k, claim(t, l, k), nil), "Complete")
			want[k] = ledger.StateCompleted
		}
	}
	released := s.key("list-released")
	ok(t, l.Release(c, released, claim(t, l, released)), "Release")

	for _, limit := range []int{0, 2} {
		got := listAll(t, in, ledger.Query{Limit: limit})
		if len(got) != len(want) {
			t.Fatalf("List with Limit %d: got %d keys, want the %d held", limit, len(got), len(want))
		}
		for k, st := range want {
			if got[k].State != st {
				t.Fatalf("List with Limit %d: key %q got %v, want %v", limit, k, got[k].State, st)
			}
		}
	}
	for _, st := range []ledger.State{ledger.StateInFlight, ledger.StateUncertain, ledger.StateCompleted} {
		got := listAll(t, in, ledger.Query{State: st, Limit: 3})
		n := 0
		for k, w := range want {
			if w == st {
				n++
				if _, found := got[k]; !found {
					t.Fatalf("List of %v keys: %q missing", st, k)
				}
			}
		}
		if len(got) != n {
			t.Fatalf("List of %v keys: got %d, want %d", st, len(got), n)
		}
	}
}
