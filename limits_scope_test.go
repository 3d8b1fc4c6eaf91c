package retryfuse

import (
	"net/http"
	"testing"

	"github.com/retryfuse/retryfuse/budget"
)

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
