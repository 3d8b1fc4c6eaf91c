package ledgertest

import (
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"testing"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/ledger"
)

// This file checks the promises on stored results, fingerprints and a
// store that cannot answer.

// completeWith claims a new key, completes it with res and returns the
// key and what a later Begin replays.
func (s *suite) completeWith(t testing.TB, l ledger.Ledger, name string, res *ledger.StoredResponse) (string, *ledger.StoredResponse) {
	t.Helper()
	key := s.key(name)
	ok(t, l.Complete(ctx(t), key, claim(t, l, key), res), "Complete")
	cl := begin(t, l, key, fpA)
	want(t, cl, decide.KeyCompleted, false, "after Complete")
	return key, cl.Stored
}

func sameStored(a, b *ledger.StoredResponse) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.StatusCode != b.StatusCode || !bytes.Equal(a.Body, b.Body) || len(a.Header) != len(b.Header) {
		return false
	}
	for k, vs := range a.Header {
		ws := b.Header[k]
		if len(vs) != len(ws) {
			return false
		}
		for i := range vs {
			if vs[i] != ws[i] {
				return false
			}
		}
	}
	return true
}

func (s *suite) storedResponse(t testing.TB) {
	l := s.ledger(t)
	full := &ledger.StoredResponse{
		StatusCode: 201,
		Header:     http.Header{"Content-Type": {"application/json"}, "X-Multi": {"a", "b"}},
		Body:       bytes.Repeat([]byte{'x'}, maxStoredBody),
	}
	orig := &ledger.StoredResponse{StatusCode: full.StatusCode, Header: full.Header.Clone(), Body: bytes.Clone(full.Body)}
	key, got := s.completeWith(t, l, "stored", full)
	if !sameStored(got, orig) {
		t.Fatalf("a result of exactly MaxStoredBody bytes: replayed %+v, want %+v", got, orig)
	}
	// What the caller gave, and what Begin handed out, are not the ledger's.
	full.Body[0], full.Header["X-Multi"][0], full.StatusCode = 'y', "changed", 500
	full.Header.Set("X-Added", "1")
	got.Body[0], got.Header["Content-Type"][0] = 'z', "changed"
	got.Header.Set("X-Added", "1")
	if again := begin(t, l, key, fpA).Stored; !sameStored(again, orig) {
		t.Fatalf("after the Complete's result and a replayed copy were changed: replayed %+v, want the result as completed %+v", again, orig)
	}

	_, got = s.completeWith(t, l, "stored-large", &ledger.StoredResponse{StatusCode: 200, Body: bytes.Repeat([]byte{'x'}, maxStoredBody+1)})
	if got != nil {
		t.Fatalf("a body of MaxStoredBody+1 bytes: replayed %+v, want the key completed without a stored result", got)
	}
	h := http.Header{}
	for i := range 101 {
		h.Add("X-Many", strconv.Itoa(i))
	}
	_, got = s.completeWith(t, l, "stored-headers", &ledger.StoredResponse{StatusCode: 200, Header: h})
	if got != nil {
		t.Fatalf("a header of 101 values: replayed %+v, want the key completed without a stored result", got)
	}
	_, got = s.completeWith(t, l, "stored-nil", nil)
	if got != nil {
		t.Fatalf("Complete with a nil result: replayed %+v, want none", got)
	}
	_, got = s.completeWith(t, l, "stored-empty", &ledger.StoredResponse{StatusCode: 204})
	if got == nil || got.StatusCode != 204 || len(got.Body) != 0 {
		t.Fatalf("a result without a body: replayed %+v, want status 204 and no body", got)
	}
}

func (s *suite) fingerprintConflict(t testing.TB) {
	l := s.ledger(t)
	c := ctx(t)
	check := func(key string, state decide.KeyState, uncertain bool, what string) {
		t.Helper()
		want(t, begin(t, l, key, fpB), decide.KeyConflict, false, what+", under another fingerprint")
		want(t, begin(t, l, key, fpA), state, uncertain, what+", under its own fingerprint after a conflict")
	}
	inFlight := s.key("conflict-in-flight")
	tok := claim(t, l, inFlight)
	check(inFlight, decide.KeyInFlight, false, "a key in flight")
	ok(t, l.Complete(c, inFlight, tok, nil), "the owner's Complete after a conflict")

	uncertain := s.key("conflict-uncertain")
	ok(t, l.Uncertain(c, uncertain, claim(t, l, uncertain)), "Uncertain")
	check(uncertain, decide.KeyInFlight, true, "an uncertain key")

	completed, _ := s.completeWith(t, l, "conflict-completed", &ledger.StoredResponse{StatusCode: 200})
	check(completed, decide.KeyCompleted, false, "a completed key")
}

func (s *suite) failsClosed(t testing.TB) {
	if s.opts.Unavailable == nil {
		t.Log("Options.Unavailable is nil: not checked")
		return
	}
	l := s.opts.Unavailable(t, s.cfg)
	c := ctx(t)
	cl, err := l.Begin(c, s.key("unavailable"), fpA)
	if !errors.Is(err, ledger.ErrUnavailable) || cl.State == decide.KeyNone && cl.Token != "" {
		t.Fatalf("Begin on a store that cannot answer: got claim %v token %q, error %v; want an error wrapping ledger.ErrUnavailable and no claim", cl.State, cl.Token, err)
	}
	if in, isInspector := l.(ledger.Inspector); isInspector {
		if info, err := in.Lookup(c, s.key("unavailable")); !errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("Lookup on a store that cannot answer: got %+v, error %v; want an error wrapping ledger.ErrUnavailable", info, err)
		}
		if _, err := in.List(c, ledger.Query{}); !errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("List on a store that cannot answer: got error %v, want one wrapping ledger.ErrUnavailable", err)
		}
	}
	if st, isSettler := l.(ledger.Settler); isSettler {
		if _, err := st.Settle(c, s.key("unavailable"), "v", ledger.Settlement{Outcome: ledger.NotApplied}); !errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("Settle on a store that cannot answer: got error %v, want one wrapping ledger.ErrUnavailable", err)
		}
	}
}
