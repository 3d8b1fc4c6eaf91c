package retryfuse

import (
	"net/http"
	"testing"
)

// The limits found last by host answer only for that host, and never once
// dropped: a scope whose limits were dropped at MaxScopes gets new ones,
// however they were dropped.
func TestScopeLimitsFoundLastAreTheScopesOwn(t *testing.T) {
	p := &policy{maxScopes: 1, maxInFlight: 1, clock: newFakeClock()}
	var s scopeLimits
	limitsOf := func(u string) *limits {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s.forRequest(req, func() string { return hostScope(req) }, p)
	}
	a := limitsOf("http://a.test/x")
	if got := limitsOf("http://a.test:80/y"); got != a {
		t.Error("http://a.test and http://a.test:80, one scope, got two limits")
	}
	b := limitsOf("http://b.test/") // a is idle: dropped to make room
	if b == a || limitsOf("http://b.test/z") != b {
		t.Fatal("b's limits are not b's own")
	}
	if got := limitsOf("http://a.test/"); got == a {
		t.Error("a's dropped limits were found again")
	}
	// Dropped by a scope found by name (a custom Scope): forgotten too.
	c := limitsOf("http://c.test/")
	s.get("named", p)
	if got := limitsOf("http://c.test/"); got == c {
		t.Error("c's limits, dropped for a named scope, were found again")
	}
}
