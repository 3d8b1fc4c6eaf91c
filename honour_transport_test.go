package retryfuse

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/honour"
	"github.com/retryfuse/retryfuse/retryfusetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// honouringServer answers as a server that honours Idempotency-Key does,
// with the markers of package idempotency: the first request under a key
// is applied and never answered (its response is lost); a repeat gets the
// stored result, marked as a replay. charges records the writes applied.
type honouringServer struct {
	*retryfusetest.Server
	charges *retryfusetest.Recorder
}

func newHonouringServer(t *testing.T) *honouringServer {
	s := &honouringServer{charges: retryfusetest.NewRecorder()}
	apply := s.charges.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "charge ch_1")
	}))
	var seen atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(honour.HeaderHonoured, "?1")
		if seen.Add(1) > 1 {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set(honour.HeaderReplayed, "true")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, "charge ch_1")
			return
		}
		apply.ServeHTTP(w, r)
	})
	s.Server = retryfusetest.NewServer(t, h, retryfusetest.ApplyThenStall())
	return s
}

func keyedPOST(t *testing.T, tr *Transport, url, key string) (*http.Response, []byte, error) {
	t.Helper()
	req := newRequest(t, testCtx(t), http.MethodPost, url, `{"amount":100}`)
	req.Header.Set("Idempotency-Key", key)
	return do(tr, req)
}

// Toward a server declared to honour keys, a keyed write whose response
// was lost is sent again with the same key and body: the caller gets the
// stored result, and the write was applied once.
func TestUncertainKeyedWriteRepeatedTowardServerThatHonoursKeys(t *testing.T) {
	srv := newHonouringServer(t)
	var replays []bool
	tr := newTransport(t, newFakeClock(), &Transport{
		Retry: RetryPolicy{
			AttemptTimeout: 100 * time.Millisecond,
			Budget:         budget.Unlimited(),
		},
		Keys: KeyPolicy{
			ServerHonours: true,
		},
		Hooks: Hooks{AttemptDone: func(i AttemptDoneInfo) { replays = append(replays, i.Replayed) }},
	})
	confirmServerKeys(t, tr, srv.URL)
	resp, body, err := keyedPOST(t, tr, srv.URL, "pay-1")
	require.NoError(t, err, "the lost response is recovered, not a reconcile error")
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.Equal(t, "charge ch_1", string(body))
	assert.Equal(t, 1, srv.charges.Total(), "applied once")
	assert.Equal(t, 2, srv.Requests())
	assert.Equal(t, []bool{false, true}, replays, "the second attempt's response is reported as a replay")
}

// Without the fact — not declared, never learnt, or learnt too long ago —
// the same write is never repeated: the caller reconciles.
func TestUncertainKeyedWriteReconciledUnlessServerKnownToHonourKeys(t *testing.T) {
	t.Run("not known", func(t *testing.T) {
		srv := newHonouringServer(t)
		tr := newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{AttemptTimeout: 100 * time.Millisecond, Budget: budget.Unlimited()}})
		_, _, err := keyedPOST(t, tr, srv.URL, "pay-2")
		var rec *ReconcileRequiredError
		require.ErrorAs(t, err, &rec)
		assert.Equal(t, 1, srv.Requests())
	})
	t.Run("an unkeyed write, declared", func(t *testing.T) {
		srv := newHonouringServer(t)
		tr := newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{AttemptTimeout: 100 * time.Millisecond, Budget: budget.Unlimited()}, Keys: KeyPolicy{ServerHonours: true}})
		_, _, err := do(tr, newRequest(t, testCtx(t), http.MethodPost, srv.URL, `{"amount":100}`))
		var rec *ReconcileRequiredError
		require.ErrorAs(t, err, &rec, "without a key the server cannot know the repeat")
		assert.Equal(t, 1, srv.Requests())
	})
}

// A scope's marker on a response to a keyed request is learnt for
// HonourMemory: an uncertain keyed write after it is repeated; once the
// memory has passed, or with learning turned off, it is not.
func TestServerHonouringKeysLearntFromItsMarker(t *testing.T) {
	for _, tc := range []struct {
		name     string
		memory   time.Duration
		advance  time.Duration
		repeated bool
	}{
		{"within the memory", 0, 9 * time.Minute, true},
		{"after the memory", 0, 11 * time.Minute, false},
		{"learning off", -1, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			charges := retryfusetest.NewRecorder()
			apply := charges.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) }))
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set(honour.HeaderHonoured, "?1")
				if key := r.Header.Get("Idempotency-Key"); key == "pay-4" && charges.Applied(key) > 0 {
					_, _ = io.Copy(io.Discard, r.Body)
					w.Header().Set(honour.HeaderReplayed, "true")
					w.WriteHeader(http.StatusCreated)
					return
				}
				apply.ServeHTTP(w, r)
			})
			// pay-3 is answered; pay-4 is applied and its response lost.
			srv := retryfusetest.NewServer(t, h, retryfusetest.Answer(), retryfusetest.ApplyThenStall())
			clk := newFakeClock()
			tr := newTransport(t, clk, &Transport{Retry: RetryPolicy{AttemptTimeout: 100 * time.Millisecond, Budget: budget.Unlimited()}, Keys: KeyPolicy{HonourMemory: tc.memory}})
			_, _, err := keyedPOST(t, tr, srv.URL, "pay-3")
			require.NoError(t, err)
			clk.Advance(tc.advance)
			resp, _, err := keyedPOST(t, tr, srv.URL, "pay-4")
			if tc.repeated {
				require.NoError(t, err)
				assert.Equal(t, http.StatusCreated, resp.StatusCode)
				assert.Equal(t, 1, charges.Applied("pay-4"))
				return
			}
			var rec *ReconcileRequiredError
			require.ErrorAs(t, err, &rec)
		})
	}
}

// problemResponse answers as package idempotency refuses a keyed request,
// with the problem type of that name (honour.ProblemInFlight, …).
func problemResponse(w http.ResponseWriter, status int, typ string) {
	w.Header().Set(honour.HeaderHonoured, "?1")
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Retry-After", "0")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, `{"type":"https://pkg.go.dev/github.com/retryfuse/retryfuse/idempotency#`+typ+`","title":"t","status":0}`)
}

// A 409 while the first request under the key runs is retried, and is no
// failure of the dependency; a 422 for a key reused with another payload is
// the conflict error; a handler's own 409 or 422 is its result.
func TestKeyedAnswersOfServerThatHonoursKeys(t *testing.T) {
	t.Run("409 in flight, then the result", func(t *testing.T) {
		srv := newTestServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
			if n == 1 {
				problemResponse(w, http.StatusConflict, honour.ProblemInFlight)
				return
			}
			w.Header().Set(honour.HeaderHonoured, "?1")
			w.Header().Set(honour.HeaderReplayed, "true")
			w.WriteHeader(http.StatusCreated)
		})
		br, err := breaker.New(breaker.Settings{FailureThreshold: 1, MinObservations: 1})
		require.NoError(t, err)
		var changes int
		tr := newTransport(t, newFakeClock(), &Transport{
			Retry: RetryPolicy{
				Budget: budget.Unlimited(),
			},
			Brake: BrakePolicy{
				Breaker: br,
			},
			Hooks: Hooks{BreakerChange: func(breaker.Change) { changes++ }},
		})
		resp, _, err := keyedPOST(t, tr, srv.URL, "pay-5")
		require.NoError(t, err)
		assert.Equal(t, http.StatusCreated, resp.StatusCode)
		assert.Equal(t, 2, srv.count())
		assert.Zero(t, changes, "an in-flight 409 is the server's correct answer, not a failure")
	})
	t.Run("422 key reused", func(t *testing.T) {
		srv := newTestServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
			problemResponse(w, http.StatusUnprocessableEntity, honour.ProblemKeyReused)
		})
		tr := newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{Budget: budget.Unlimited()}})
		resp, _, err := keyedPOST(t, tr, srv.URL, "pay-6")
		assert.Nil(t, resp)
		require.ErrorIs(t, err, ErrIdempotencyConflict)
		assert.NotErrorIs(t, err, ErrDeclined)
		assert.Contains(t, err.Error(), `idempotency key "pay-6"`)
		assert.Equal(t, 1, srv.count())
	})
	t.Run("a handler's own 422", func(t *testing.T) {
		srv := newTestServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
			w.Header().Set(honour.HeaderHonoured, "?1")
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = io.WriteString(w, `{"type":"https://api.example/problems/amount","title":"bad amount"}`)
		})
		tr := newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{Budget: budget.Unlimited()}})
		resp, body, err := keyedPOST(t, tr, srv.URL, "pay-7")
		require.NoError(t, err)
		assert.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
		assert.Contains(t, string(body), "bad amount", "the body read to tell its type is given back whole")
	})
}

// The decision core is asked contract version 2, with the fact.
func TestDecisionAsksVersion2WithTheFact(t *testing.T) {
	srv := newHonouringServer(t)
	var verdicts []decide.Verdict
	tr := newTransport(t, newFakeClock(), &Transport{
		Retry: RetryPolicy{
			AttemptTimeout: 100 * time.Millisecond,
			Budget:         budget.Unlimited(),
		},
		Keys: KeyPolicy{
			ServerHonours: true,
		},
		Hooks: Hooks{Decision: func(i DecisionInfo) { verdicts = append(verdicts, i.Verdict) }},
	})
	confirmServerKeys(t, tr, srv.URL)
	_, _, err := keyedPOST(t, tr, srv.URL, "pay-8")
	require.NoError(t, err)
	require.NotEmpty(t, verdicts)
	assert.Equal(t, 2, verdicts[0].Version)
	assert.Equal(t, decide.ReplaySafe, verdicts[0].Decision)
	assert.Contains(t, verdicts[0].Reason, "honours the idempotency key")
}
