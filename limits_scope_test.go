package retryfuse

import (
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
)

// The limits kept per scope: the record a call finds, and which records
// the bounded registry keeps and drops.

// The record found last by host answers only for that host, and never once
// dropped: a scope whose record was dropped at MaxScopes gets a new one,
// however it was dropped.
func TestScopeRecordFoundLastIsTheScopesOwn(t *testing.T) {
	p := &policy{maxScopes: 1, maxInFlight: 1, clock: newFakeClock(), budget: budget.Unlimited()}
	var s scopes
	recordOf := func(u string) *scopeRecord {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		st, err := s.find(req, p)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	a := recordOf("http://a.test/x")
	if got := recordOf("http://a.test:80/y"); got != a {
		t.Error("http://a.test and http://a.test:80, one scope, got two record")
	}
	b := recordOf("http://b.test/") // a is idle: dropped to make room
	if b == a || recordOf("http://b.test/z") != b {
		t.Fatal("b's record are not b's own")
	}
	if got := recordOf("http://a.test/"); got == a {
		t.Error("a's dropped record were found again")
	}
	// Dropped by a scope found by name (a custom Scope): forgotten too.
	c := recordOf("http://c.test/")
	recordNamed(&s, "named", p)
	if got := recordOf("http://c.test/"); got == c {
		t.Error("c's record, dropped for a named scope, were found again")
	}
}

// A scope's bulkhead is not dropped to make room while attempts hold its
// slots: a fresh one would admit MaxInFlight more beside them.
func TestBulkheadKeptWhileInFlight(t *testing.T) {
	noGoroutineLeft(t)
	srv := newPathServer(t, "/a")
	g := newGatedSleep(newFakeClock())
	tr := bulkheadTransport(t, g, &Transport{Scope: ScopePolicy{Max: 1}})
	tr.Scope.Of = func(r *http.Request) string { return r.URL.Path[:2] }

	a := goDo(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL+"/a", ""))
	srv.next(t)
	// Another scope, while /a holds the only slot of its own.
	if _, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL+"/b", "")); err != nil || string(body) != "/b" {
		t.Fatalf("the call to another scope: got %v, %q", err, body)
	}
	srv.next(t)
	_, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL+"/a2", ""))
	var full *BulkheadFullError
	if !errors.As(err, &full) {
		t.Errorf("a second call to the busy scope: got %v, want a *BulkheadFullError", err)
	}
	srv.let("/a")
	a.wait(t)
}

func TestScopeLimitsEviction(t *testing.T) {
	clk := newFakeClock()
	p := &policy{maxScopes: 2, maxInFlight: 1, rateLimit: 1, rateBurst: 1, clock: clk}
	var s scopes
	has := func(scopes ...string) {
		t.Helper()
		var got []string
		for k := range s.m {
			got = append(got, k.scope)
		}
		slices.Sort(got)
		if !slices.Equal(got, scopes) {
			t.Errorf("scopes kept: got %v, want %v", got, scopes)
		}
	}
	a, b := recordNamed(&s, "a", p), recordNamed(&s, "b", p)
	if _, ok := a.bulkhead.TryAcquireAt(time.Time{}); !ok {
		t.Fatal("a's slot was taken")
	}
	b.rate.ReserveN(clk.Now(), 1) // b's bucket owes a token: something to forget

	c := recordNamed(&s, "c", p) // a is busy: b goes, its debt forgotten
	has("a", "c")
	if _, ok := c.bulkhead.TryAcquireAt(time.Time{}); !ok {
		t.Fatal("c's slot was taken")
	}
	recordNamed(&s, "d", p) // every scope busy: none goes
	has("a", "c", "d")

	a.bulkhead.ReleaseAt(time.Time{}, false)
	a.rate.ReserveN(clk.Now(), 1)
	// Back within the bound: d, with nothing to forget, goes first, then
	// a, idle but owing a token; c, busy, stays.
	recordNamed(&s, "e", p)
	has("c", "e")
	if got := recordNamed(&s, "c", p); got != c {
		t.Error("c's limits were replaced")
	}

	// Between two idle scopes, the one with nothing to forget goes.
	for range 20 { // map order varies: try it often
		var s2 scopes
		x := recordNamed(&s2, "x", p)
		x.rate.ReserveN(clk.Now(), 1)
		recordNamed(&s2, "y", p)
		recordNamed(&s2, "z", p)
		if _, ok := s2.m[hostKey{scope: "x"}]; !ok {
			t.Fatal("x, owing a token, was dropped before y, full")
		}
	}
}
