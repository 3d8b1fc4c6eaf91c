package retryfuse

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/retryfuse/retryfuse/budget"
)

func TestDefaultScopeIsSchemeHostAndPort(t *testing.T) {
	for _, tt := range []struct{ url, want string }{
		{"http://api.example.com/x", "http://api.example.com:80"},
		{"https://api.example.com/x", "https://api.example.com:443"},
		{"https://API.example.com:8443/x", "https://API.example.com:8443"},
		{"http://[::1]:8080/", "http://[::1]:8080"},
		{"http://user:pw@127.0.0.1:9/", "http://127.0.0.1:9"},
	} {
		req, err := http.NewRequest(http.MethodGet, tt.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := hostScope(req); got != tt.want {
			t.Errorf("hostScope(%s): got %q, want %q", tt.url, got, tt.want)
		}
	}
}

// Concurrent first calls to a scope create its budget once, so that a
// factory that keeps its budgets sees the one in use.
func TestNewBudgetCalledOncePerScope(t *testing.T) {
	var created atomic.Int32
	tr := &Transport{
		Retry: RetryPolicy{
			NewBudget: func(string) (budget.Budget, error) {
				created.Add(1)
				return budget.NewRatio(budget.RatioConfig{})
			},
		},
	}
	tr.setup()
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:1/", nil)
	var wg sync.WaitGroup
	got := make([]budget.Budget, 64)
	for i := range got {
		wg.Go(func() {
			b, err := budgetOf(tr, req)
			if err != nil {
				t.Error(err)
			}
			got[i] = b
		})
	}
	wg.Wait()
	if n := created.Load(); n != 1 {
		t.Errorf("NewBudget calls: got %d, want 1", n)
	}
	for i := range got {
		if got[i] != got[0] {
			t.Fatalf("caller %d got another budget than caller 0", i)
		}
	}
}

// The map of per-scope budgets stays within MaxScopes.
func TestBudgetScopesBounded(t *testing.T) {
	tr := &Transport{Scope: ScopePolicy{Max: 4}}
	tr.setup()
	for i := range 20 {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://h%d.test/", i), nil)
		if _, err := budgetOf(tr, req); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(tr.scopes.m); n > 4 {
		t.Errorf("budgets kept: got %d, want at most 4", n)
	}
}

// One scope is one budget, however its URL spells the default port:
// http://h/ and http://h:80/ are the same dependency (hostScope names both
// "http://h:80"), so NewBudget is called once and both share its budget.
func TestDefaultPortSpellingsShareOneBudget(t *testing.T) {
	var (
		mu     sync.Mutex
		scopes []string
	)
	tr := newTransport(t, newFakeClock(), &Transport{
		Base: always503(),
		Retry: RetryPolicy{
			MaxAttempts: 1,
			NewBudget: func(scope string) (budget.Budget, error) {
				mu.Lock()
				scopes = append(scopes, scope)
				mu.Unlock()
				return budget.Unlimited(), nil
			},
		},
	})
	for _, u := range []string{"http://api.example.test/a", "http://api.example.test:80/b", "https://api.example.test/c", "https://api.example.test:443/d"} {
		resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, u, ""))
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		_ = resp
	}
	want := []string{"http://api.example.test:80", "https://api.example.test:443"}
	if len(scopes) != len(want) || scopes[0] != want[0] || scopes[1] != want[1] {
		t.Errorf("NewBudget called for scopes %q, want %q (once per scope)", scopes, want)
	}
}

// The budget kept apart for the scope found last answers only for that
// scope: calls alternating between two hosts each get their own host's
// budget, made once, and a scope dropped at MaxScopes gets a new budget on
// its return.
func TestBudgetFoundLastIsItsScopesOwn(t *testing.T) {
	var made []string
	tr := &Transport{
		Scope: ScopePolicy{
			Max: 2,
		},
		Retry: RetryPolicy{
			NewBudget: func(scope string) (budget.Budget, error) {
				made = append(made, scope)
				return &budget.Ratio{}, nil
			},
		},
	}
	tr.setup()
	budgetOf := func(u string) budget.Budget {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		b, err := budgetOf(tr, req)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b := budgetOf("http://a.test/"), budgetOf("http://b.test/")
	for range 3 {
		if budgetOf("http://a.test/x") != a || budgetOf("http://b.test/y") != b {
			t.Fatal("alternating calls got another scope's budget")
		}
	}
	if len(made) != 2 {
		t.Fatalf("NewBudget calls: got %v, want one per scope", made)
	}
	budgetOf("http://c.test/") // drops a or b
	dropped := "http://a.test/"
	if _, ok := tr.scopes.m[hostKey{scheme: "http", host: "a.test"}]; ok {
		dropped = "http://b.test/"
	}
	before := budgetOf(dropped)
	if before == a || before == b || len(made) != 4 {
		t.Errorf("a scope dropped at MaxScopes kept its old budget (NewBudget calls %v)", made)
	}
}

// budgetOf returns the budget of req's scope in tr's records.
func budgetOf(tr *Transport, req *http.Request) (budget.Budget, error) {
	st, err := tr.scopes.find(req, &tr.p)
	if err != nil {
		return nil, err
	}
	return st.budget, nil
}

// recordNamed returns the record of the scope named name in s, as a
// custom Scope names it.
func recordNamed(s *scopes, name string, p *policy) *scopeRecord {
	q := *p
	q.scope = func(*http.Request) string { return name }
	if q.budget == nil && q.newBudget == nil {
		q.budget = budget.Unlimited()
	}
	st, err := s.find(&http.Request{}, &q)
	if err != nil {
		panic(err)
	}
	return st
}
