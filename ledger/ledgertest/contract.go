package ledgertest

import (
	"errors"
	"sync"
	"testing"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/ledger"
)

// This file checks the promises of the Ledger contract on claims, tokens
// and expiry.

var fpA, fpB = ledger.Fingerprint{0xa, 1}, ledger.Fingerprint{0xb, 2}

func begin(t testing.TB, l ledger.Ledger, key string, fp ledger.Fingerprint) ledger.Claim {
	t.Helper()
	cl, err := l.Begin(ctx(t), key, fp)
	if err != nil {
		t.Fatalf("Begin(%q): %v", key, err)
	}
	return cl
}

// claim begins key on a free key and returns the owner's token.
func claim(t testing.TB, l ledger.Ledger, key string) string {
	t.Helper()
	cl := begin(t, l, key, fpA)
	if cl.State != decide.KeyNone || cl.Token == "" {
		t.Fatalf("Begin(%q) of a free key: got state %v token %q, want KeyNone with a token", key, cl.State, cl.Token)
	}
	return cl.Token
}

// want checks cl's state after what happened (what).
func want(t testing.TB, cl ledger.Claim, state decide.KeyState, uncertain bool, what string) {
	t.Helper()
	if cl.State != state || cl.Uncertain != uncertain {
		t.Fatalf("%s: Begin got state %v uncertain %v, want %v uncertain %v", what, cl.State, cl.Uncertain, state, uncertain)
	}
}

func ok(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func wantErrToken(t testing.TB, err error, what string) {
	t.Helper()
	if !errors.Is(err, ledger.ErrToken) {
		t.Fatalf("%s: got error %v, want one wrapping ledger.ErrToken", what, err)
	}
}

func (s *suite) oneOwner(t testing.TB) {
	l := s.ledger(t)
	const callers = 8
	for range 3 {
		key := s.key("one-owner")
		claims := make([]ledger.Claim, callers)
		errs := make([]error, callers)
		var start, wg sync.WaitGroup
		start.Add(1)
		for i := range callers {
			wg.Go(func() {
				start.Wait()
				claims[i], errs[i] = l.Begin(ctx(t), key, fpA)
			})
		}
		start.Done()
		wg.Wait()
		owners := 0
		for i, cl := range claims {
			ok(t, errs[i], "a concurrent Begin")
			switch {
			case cl.State == decide.KeyNone:
				owners++
			case cl.State != decide.KeyInFlight || cl.Uncertain:
				t.Fatalf("a concurrent Begin of a claimed key: got state %v uncertain %v, want KeyInFlight", cl.State, cl.Uncertain)
			}
		}
		if owners != 1 {
			t.Fatalf("%d concurrent Begins of key %q: %d got KeyNone, want exactly 1", callers, key, owners)
		}
	}
}

func (s *suite) tokenFencing(t testing.TB) {
	l := s.ledger(t)
	c := ctx(t)
	key := s.key("fencing")
	tok := claim(t, l, key)
	wrong := tok + "-not-the-owner"
	wantErrToken(t, l.Complete(c, key, wrong, &ledger.StoredResponse{StatusCode: 200}), "Complete with a wrong token")
	wantErrToken(t, l.Release(c, key, wrong), "Release with a wrong token")
	wantErrToken(t, l.Uncertain(c, key, wrong), "Uncertain with a wrong token")
	wantErrToken(t, l.Complete(c, key, "", nil), "Complete with an empty token")
	want(t, begin(t, l, key, fpA), decide.KeyInFlight, false, "after a wrong token's Complete, Release and Uncertain")

	ok(t, l.Release(c, key, tok), "the owner's Release")
	wantErrToken(t, l.Release(c, key, tok), "a used token's second Release")
	wantErrToken(t, l.Complete(c, key, tok, &ledger.StoredResponse{StatusCode: 200}), "Complete with the token of a released claim")
	wantErrToken(t, l.Uncertain(c, key, tok), "Uncertain with the token of a released claim")

	tok2 := claim(t, l, key) // free again, whatever the old token tried
	wantErrToken(t, l.Complete(c, key, tok, nil), "Complete with the token of an earlier claim on the key")
	want(t, begin(t, l, key, fpA), decide.KeyInFlight, false, "after an earlier claim's token tried to end a new one")
	ok(t, l.Complete(c, key, tok2, &ledger.StoredResponse{StatusCode: 201, Body: []byte("first")}), "the new owner's Complete")
	wantErrToken(t, l.Release(c, key, tok2), "Release with the token of a completed claim")
	wantErrToken(t, l.Uncertain(c, key, tok2), "Uncertain with the token of a completed claim")
	// A second Complete by the same token may be accepted as the same step
	// sent again; it must not change what is stored.
	_ = l.Complete(c, key, tok2, &ledger.StoredResponse{StatusCode: 500, Body: []byte("second")})
	cl := begin(t, l, key, fpA)
	want(t, cl, decide.KeyCompleted, false, "after a completed claim's token was used again")
	if cl.Stored == nil || cl.Stored.StatusCode != 201 || string(cl.Stored.Body) != "first" {
		t.Fatalf("after a completed claim's token was used again: stored %+v, want status 201 body %q", cl.Stored, "first")
	}
}

func (s *suite) uncertainHolds(t testing.TB) {
	l := s.ledger(t)
	c := ctx(t)
	for _, applied := range []bool{true, false} {
		key := s.key("uncertain")
		tok := claim(t, l, key)
		ok(t, l.Uncertain(c, key, tok), "the owner's Uncertain")
		cl := begin(t, l, key, fpA)
		want(t, cl, decide.KeyInFlight, true, "after Uncertain")
		if cl.Token == "" {
			t.Fatalf("after Uncertain: Begin gave no token to end the uncertain claim with")
		}
		want(t, begin(t, l, key, fpA), decide.KeyInFlight, true, "Begin again after Uncertain")
		if applied {
			ok(t, l.Complete(c, key, cl.Token, nil), "Complete with the uncertain claim's token")
			want(t, begin(t, l, key, fpA), decide.KeyCompleted, false, "after an uncertain claim was completed")
			continue
		}
		ok(t, l.Release(c, key, cl.Token), "Release with the uncertain claim's token")
		claim(t, l, key) // free
	}
}

func (s *suite) claimExpires(t testing.TB) {
	l := s.ledger(t)
	c := ctx(t)
	completed, released, reported := s.key("lapse-complete"), s.key("lapse-release"), s.key("lapse-uncertain")
	toks := map[string]string{}
	for _, k := range []string{completed, released, reported} {
		toks[k] = claim(t, l, k)
		want(t, begin(t, l, k, fpA), decide.KeyInFlight, false, "a claim within its InFlightTTL")
	}
	s.waitUntil(s.now().Add(s.cfg.InFlightTTL + s.margin)) // from after the claims
	for _, k := range []string{completed, released, reported} {
		want(t, begin(t, l, k, fpA), decide.KeyInFlight, true, "a claim past its InFlightTTL, never ended")
		want(t, begin(t, l, k, fpA), decide.KeyInFlight, true, "Begin again on an expired claim")
		want(t, begin(t, l, k, fpB), decide.KeyConflict, false, "an expired claim, under another fingerprint")
	}
	ok(t, l.Complete(c, completed, toks[completed], nil), "the owner's Complete of its expired claim")
	want(t, begin(t, l, completed, fpA), decide.KeyCompleted, false, "an expired claim completed by its owner")
	ok(t, l.Release(c, released, toks[released]), "the owner's Release of its expired claim")
	claim(t, l, released)
	ok(t, l.Uncertain(c, reported, toks[reported]), "the owner's Uncertain of its expired claim")
	want(t, begin(t, l, reported, fpA), decide.KeyInFlight, true, "an expired claim its owner reported uncertain")
}

func (s *suite) keyExpires(t testing.TB) {
	l := s.ledger(t)
	c := ctx(t)
	completed, uncertain, lapsed := s.key("ttl-complete"), s.key("ttl-uncertain"), s.key("ttl-lapsed")
	beforeEnds := s.now()
	ok(t, l.Complete(c, completed, claim(t, l, completed), &ledger.StoredResponse{StatusCode: 200}), "Complete")
	ok(t, l.Uncertain(c, uncertain, claim(t, l, uncertain)), "Uncertain")
	afterEnds := s.now()
	claim(t, l, lapsed) // never ended: uncertain after InFlightTTL, for TTL
	afterClaim := s.now()
	s.waitUntil(beforeEnds.Add(s.cfg.TTL - s.margin))
	want(t, begin(t, l, completed, fpA), decide.KeyCompleted, false, "a completed key within its TTL")
	want(t, begin(t, l, uncertain, fpA), decide.KeyInFlight, true, "an uncertain key within its TTL")
	s.waitUntil(afterEnds.Add(s.cfg.TTL + s.margin))
	claim(t, l, completed) // free: the claim fails the check when it is not
	claim(t, l, uncertain)
	want(t, begin(t, l, lapsed, fpA), decide.KeyInFlight, true, "an expired claim within InFlightTTL + TTL of its Begin")
	s.waitUntil(afterClaim.Add(s.cfg.InFlightTTL + s.cfg.TTL + s.margin))
	claim(t, l, lapsed)
}
