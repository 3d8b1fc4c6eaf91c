package retryfuseredis

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/stored"
	"github.com/retryfuse/retryfuse/ledger"
)

// TestStoredHeaderBoundMatchesCore pins the copy of the core's header
// bound (kept unexported there) to the core: at each edge, a
// ledger.Memory stores the result exactly when stored.HeaderFits says so.
func TestStoredHeaderBoundMatchesCore(t *testing.T) {
	fields := func(n int) http.Header {
		h := http.Header{}
		for i := range n {
			h.Add("X-H"+strconv.Itoa(i), "v")
		}
		return h
	}
	sized := func(n int) http.Header { // n bytes of name and value
		return http.Header{"X-Big": {strings.Repeat("a", n-len("X-Big"))}}
	}
	cases := map[string]http.Header{
		"none":                       nil,
		"100 values":                 fields(stored.MaxHeaderFields),
		"101 values":                 fields(stored.MaxHeaderFields + 1),
		"100 values of one name":     {"X-Many": make([]string, stored.MaxHeaderFields)},
		"101 values of one name":     {"X-Many": make([]string, stored.MaxHeaderFields+1)},
		"32 KiB":                     sized(stored.MaxHeaderBytes),
		"32 KiB and a byte":          sized(stored.MaxHeaderBytes + 1),
		"32 KiB over two names":      {"A": {strings.Repeat("a", 16<<10-1)}, "B": {strings.Repeat("b", 16<<10-1)}},
		"32 KiB and a byte over two": {"A": {strings.Repeat("a", 16<<10)}, "B": {strings.Repeat("b", 16<<10-1)}},
	}
	var kept, refused int
	for name, h := range cases {
		m := &ledger.Memory{}
		cl, err := m.Begin(bg(), "k", fpA)
		if err != nil || cl.State != decide.KeyNone {
			t.Fatalf("%s: Begin: %v %v", name, cl.State, err)
		}
		if err := m.Complete(bg(), "k", cl.Token, &ledger.StoredResponse{StatusCode: 200, Header: h}); err != nil {
			t.Fatal(err)
		}
		cl, _ = m.Begin(bg(), "k", fpA)
		core := cl.Stored != nil
		if got := stored.HeaderFits(h); got != core {
			t.Errorf("%s: stored.HeaderFits %v, the core's ledger.Memory stores it: %v", name, got, core)
		}
		if core {
			kept++
		} else {
			refused++
		}
	}
	if kept == 0 || refused == 0 {
		t.Fatalf("the cases stored %d and refused %d: want both sides of the bound", kept, refused)
	}
}
