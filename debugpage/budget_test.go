package debugpage

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/budget"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// userBudget is a Budget of a user's own whose Snapshot the page calls:
// snap tells what it answers.
type userBudget struct{ snap func() budget.Snapshot }

func (userBudget) RecordRequest(context.Context)            {}
func (userBudget) AllowRetry(context.Context) (bool, error) { return true, nil }
func (b userBudget) Snapshot() budget.Snapshot              { return b.snap() }

// calledTransport is a Transport spending b, watched by p, that has made
// one call (so that it keeps a scope: its bulkhead's).
func calledTransport(t *testing.T, p *Page, b budget.Budget) {
	t.Helper()
	srv, _ := backend(t, http.StatusOK)
	tr := &retryfuse.Transport{Retry: retryfuse.RetryPolicy{Budget: b}, Load: retryfuse.LoadPolicy{MaxInFlight: 64}}
	tr.Hooks = retryfuse.JoinHooks(tr.Hooks, p.Watch("user", tr))
	t.Cleanup(tr.CloseIdleConnections)
	get(t, &http.Client{Transport: tr}, srv.URL)
}

// A panic while a page is read (a user's Budget whose Snapshot panics)
// goes up to the server as any handler's does, and leaves the page
// answering the next request: its turn is given back.
func TestPageAnswersAgainAfterAReadThatPanicked(t *testing.T) {
	p := newPage()
	panics := true
	calledTransport(t, p, userBudget{snap: func() budget.Snapshot {
		if panics {
			panic("the budget's store is gone")
		}
		return budget.Snapshot{Available: 2}
	}})
	require.Panics(t, func() { serve(p, "/?format=json", "") })
	panics = false
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/?format=json", nil).WithContext(ctx))
	require.NoError(t, ctx.Err(), "the page waited for a turn never given back")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Contains(t, rec.Body.String(), `"available":2`)
}

// A value JSON cannot hold (a user's Budget reporting NaN) is no empty
// 200: the page answers 500 with the reason.
func TestPageThatCannotBeEncodedIsAnErrorNotAnEmptyAnswer(t *testing.T) {
	p := newPage()
	calledTransport(t, p, userBudget{snap: func() budget.Snapshot { return budget.Snapshot{Available: math.NaN()} }})
	rec := serve(p, "/?format=json", "")
	assert.Equal(t, http.StatusInternalServerError, rec.Code, rec.Body.String())
	assert.Contains(t, rec.Body.String(), "NaN")
}
