package retryfuse

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/budget"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// BreakerScope divides the breaker's scopes by route while the budgets,
// the limits and the ledger stay per host.

// countedBudget is an unlimited budget that counts the requests recorded.
type countedBudget struct{ requests atomic.Int64 }

func (b *countedBudget) RecordRequest(context.Context) { b.requests.Add(1) }
func (b *countedBudget) AllowRetry(context.Context) (bool, error) {
	return true, nil
}

// budgetFactory makes a countedBudget per scope and keeps them by name.
type budgetFactory struct {
	mu      sync.Mutex
	budgets map[string]*countedBudget
}

func (f *budgetFactory) newBudget(scope string) (budget.Budget, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.budgets == nil {
		f.budgets = map[string]*countedBudget{}
	}
	b := &countedBudget{}
	f.budgets[scope] = b
	return b, nil
}

func byPath(r *http.Request) string { return r.URL.Path }

func TestBreakerScopeOpensOnlyTheFailingRoute(t *testing.T) {
	srv := newTestServer(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/failing" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	host := scopeOf(t, srv.Server)
	clock := newFakeClockAt(fixedStart)
	tr, b, rec := newBreakerTransport(t, clock, breaker.Settings{FailureThreshold: 3})
	tr.Retry.Budget = nil
	budgets := &budgetFactory{}
	tr.Retry.NewBudget = budgets.newBudget
	tr.Brake.Route = byPath
	client := &http.Client{Transport: tr}

	refused := 0
	for i := range 10 {
		code, err := getStatus(t, client, srv.URL+"/healthy")
		require.NoError(t, err, "healthy call %d", i)
		require.Equal(t, http.StatusOK, code, "healthy call %d", i)
		if _, err := getStatus(t, client, srv.URL+"/failing"); errors.Is(err, ErrCircuitOpen) {
			refused++
		}
	}
	assert.Equal(t, 7, refused, "failing calls refused once its breaker opened")
	assert.Equal(t, 10+3, srv.count(), "requests sent: every healthy call, and the failing route's until it opened")
	changes := rec.all()
	require.Len(t, changes, 1)
	assert.Equal(t, host+" /failing", changes[0].Scope)
	assert.Equal(t, breaker.Open, changes[0].To)

	var states []string
	for _, s := range b.Snapshot() {
		states = append(states, s.Scope+" "+s.To.String())
	}
	assert.Equal(t, []string{host + " /failing open", host + " /healthy closed"}, states)

	require.Len(t, budgets.budgets, 1, "one budget for the host")
	hostBudget := budgets.budgets[host]
	require.NotNil(t, hostBudget, "the budget is the host's: %v", budgets.budgets)
	assert.Equal(t, int64(20), hostBudget.requests.Load(), "both routes' calls counted in the host's budget")
}

// Without BreakerScope, the same traffic opens the host's breaker for
// both routes: the reason to divide it.
func TestWithoutBreakerScopeOneRouteOpensTheHost(t *testing.T) {
	srv := newTestServer(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/failing" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	tr, _, _ := newBreakerTransport(t, newFakeClockAt(fixedStart), breaker.Settings{FailureThreshold: 3})
	client := &http.Client{Transport: tr}
	for range 3 {
		_, _ = getStatus(t, client, srv.URL+"/failing")
	}
	_, err := getStatus(t, client, srv.URL+"/healthy")
	assert.ErrorIs(t, err, ErrCircuitOpen)
}

func TestBreakerScopeEmptyOrPanickingMeansTheWholeScope(t *testing.T) {
	for name, f := range map[string]func(*http.Request) string{
		"empty":  func(*http.Request) string { return "" },
		"panics": func(*http.Request) string { panic("no route") },
	} {
		t.Run(name, func(t *testing.T) {
			srv := statusServer(t, http.StatusServiceUnavailable, "")
			tr, b, _ := newBreakerTransport(t, newFakeClockAt(fixedStart), breaker.Settings{FailureThreshold: 2})
			tr.Brake.Route = f
			client := &http.Client{Transport: tr}
			for range 2 {
				code, err := getStatus(t, client, srv.URL+"/x")
				require.NoError(t, err)
				require.Equal(t, http.StatusServiceUnavailable, code)
			}
			snaps := b.Snapshot()
			require.Len(t, snaps, 1)
			assert.Equal(t, scopeOf(t, srv.Server), snaps[0].Scope)
			assert.Equal(t, breaker.Open, snaps[0].To)
		})
	}
}
