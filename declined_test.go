package retryfuse

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/internal/throttle"
	"github.com/retryfuse/retryfuse/ledger"
	"github.com/retryfuse/retryfuse/retryfusetest"
)

// ErrDeclined tells "retryfuse held back" from "the dependency broke":
// each error is made by a real call through http.Client where practical,
// and must survive its *url.Error.

// throttleMinRejects is how many rejections the throttle's window holds
// before it refuses a call, as the README says: 5 (internal/throttle's
// minRejects).
const throttleMinRejects = 5

// declinedCase makes one call and returns its error, and how many
// requests reached the dependency.
type declinedCase struct {
	name string
	call func(t *testing.T) (err error, sent int)
	// match tells whether the error is the one the case makes.
	match func(error) bool
}

// newDeclinedTransport is a Transport on a fake clock that never waits
// for real, with no budget.
func newDeclinedTransport(t *testing.T, tr *Transport) *Transport {
	t.Helper()
	if tr.Retry.Budget == nil && tr.Retry.NewBudget == nil {
		tr.Retry.Budget = budget.Unlimited()
	}
	return newTransport(t, newFakeClock(), tr)
}

func errAs[T error](err error) bool {
	var target T
	return errors.As(err, &target)
}

func TestDeclinedErrorsMatchErrDeclined(t *testing.T) {
	tests := []declinedCase{
		{"budget exhausted", func(t *testing.T) (error, int) {
			u := refusedURL(t)
			tr := newDeclinedTransport(t, &Transport{Retry: RetryPolicy{Budget: &refusingBudget{}}})
			_, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, u, ""))
			return err, 0
		}, func(err error) bool { return errors.Is(err, ErrBudgetExhausted) }},

		{"circuit open", func(t *testing.T) (error, int) {
			srv := statusServer(t, http.StatusOK, "ok")
			tr := newDeclinedTransport(t, &Transport{Brake: BrakePolicy{Breaker: openBreaker(t)}, Scope: ScopePolicy{Of: func(*http.Request) string { return "dep" }}})
			_, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
			return err, srv.count()
		}, errAs[*breaker.OpenError]},

		{"bulkhead full", func(t *testing.T) (error, int) {
			srv := newSettableServer(t, http.StatusOK)
			tr := newDeclinedTransport(t, &Transport{Load: LoadPolicy{MaxInFlight: 1}})
			g := srv.hold()
			held := make(chan error, 1)
			go func() {
				_, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
				held <- err
			}()
			<-g.arrived
			_, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
			sent := int(srv.requests.Load())
			close(g.release)
			if herr := <-held; herr != nil {
				t.Errorf("the held call: got %v, want nil", herr)
			}
			return err, sent - 1
		}, errAs[*BulkheadFullError]},

		{"rate limited", func(t *testing.T) (error, int) {
			srv := statusServer(t, http.StatusOK, "ok")
			tr := newDeclinedTransport(t, &Transport{Load: LoadPolicy{RateLimit: 1, RateBurst: 1, MaxWait: -1}})
			if _, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, "")); err != nil {
				t.Fatalf("the first call: %v", err)
			}
			_, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
			return err, srv.count() - 1
		}, errAs[*RateLimitError]},

		{"throttled", func(t *testing.T) (error, int) {
			srv := statusServer(t, http.StatusServiceUnavailable, "busy")
			tr := newDeclinedTransport(t, &Transport{Retry: RetryPolicy{MaxAttempts: 1}, Load: LoadPolicy{Throttle: ThrottlePolicy{On: true}}})
			setRandN(tr, func(int64) int64 { return 0 }) // refuse whenever it may
			for range throttleMinRejects {
				if _, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, "")); err != nil {
					t.Fatalf("a call the dependency rejects: %v", err)
				}
			}
			_, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
			return err, srv.count() - throttleMinRejects
		}, func(err error) bool { return errors.Is(err, throttle.ErrThrottled) }},

		{"deadline before the retry", func(t *testing.T) (error, int) {
			u := refusedURL(t)
			tr := newDeclinedTransport(t, &Transport{Retry: RetryPolicy{InitialBackoff: time.Hour}})
			setRandN(tr, func(n int64) int64 { return n - 1 })
			ctx, cancel := context.WithTimeout(testCtx(t), time.Minute)
			defer cancel()
			_, _, err := do(tr, newRequest(t, ctx, http.MethodGet, u, ""))
			return err, 0
		}, func(err error) bool { return errors.Is(err, ErrDeadline) }},

		{"duplicate in flight", func(t *testing.T) (error, int) {
			ledger, _ := newLedgerOnFakeClock(t, &ledger.Memory{})
			srv := newOrdersServer(t, always(orderHold))
			client, _ := newLedgerClient(t, ledger, nil)
			held := doAsync(client, newKeyedPOST(t, callCtx(t), srv.url(), "k-dup", `{"item":"book"}`))
			srv.waitArrived(t, 1)
			_, _, err := postKeyed(t, client, srv.url(), "k-dup", `{"item":"book"}`)
			sent := int(srv.posts.Load()) - 1
			close(srv.release)
			if r := receiveReply(t, held); r.err == nil {
				readAndClose(t, r.resp)
			}
			return err, sent
		}, func(err error) bool { return errors.Is(err, ErrDuplicateInFlight) }},

		{"ledger unavailable", func(t *testing.T) (error, int) {
			srv := newOrdersServer(t, always(orderApply))
			client, _ := newLedgerClient(t, brokenLedger{errors.New("store down")}, nil)
			_, _, err := postKeyed(t, client, srv.url(), "k-down", `{"item":"book"}`)
			return err, int(srv.posts.Load())
		}, func(err error) bool { return errors.Is(err, ErrLedgerUnavailable) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err, sent := tt.call(t)
			if err == nil {
				t.Fatal("got no error, want one")
			}
			if !errAs[*url.Error](err) {
				t.Errorf("got %T, want http.Client's *url.Error around it", err)
			}
			if !tt.match(err) {
				t.Errorf("got %v, want the %s error", err, tt.name)
			}
			if !errors.Is(err, ErrDeclined) {
				t.Errorf("errors.Is(%v, ErrDeclined) = false, want true", err)
			}
			if sent != 0 {
				t.Errorf("requests the declined call sent: got %d, want 0", sent)
			}
		})
	}
}

func TestFailuresDoNotMatchErrDeclined(t *testing.T) {
	tests := []declinedCase{
		{"attempts exhausted on connection errors", func(t *testing.T) (error, int) {
			u := refusedURL(t)
			tr := newDeclinedTransport(t, &Transport{Retry: RetryPolicy{MaxAttempts: 2}})
			_, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, u, ""))
			return err, 0
		}, func(err error) bool { return errors.Is(err, ErrAttemptsExhausted) }},

		{"not repeatable", func(t *testing.T) (error, int) {
			u := refusedURL(t)
			tr := newDeclinedTransport(t, &Transport{})
			req := newRequest(t, testCtx(t), http.MethodPut, u, "body")
			req.GetBody = nil // the body cannot be had again
			_, _, err := do(tr, req)
			return err, 0
		}, func(err error) bool { return errors.Is(err, ErrNotRepeatable) }},

		{"reconcile required", func(t *testing.T) (error, int) {
			// The body is read and applied, then the connection reset.
			s := retryfusetest.NewServer(t, retryfusetest.NewRecorder().Wrap(nil), retryfusetest.ApplyThenReset())
			tr := newDeclinedTransport(t, &Transport{})
			req := newRequest(t, testCtx(t), http.MethodPost, s.URL, "order")
			_, _, err := do(tr, req)
			return err, 0
		}, errAs[*ReconcileRequiredError]},

		{"caller canceled", func(t *testing.T) (error, int) {
			srv := statusServer(t, http.StatusOK, "ok")
			tr := newDeclinedTransport(t, &Transport{})
			ctx, cancel := context.WithCancel(testCtx(t))
			cancel()
			_, _, err := do(tr, newRequest(t, ctx, http.MethodGet, srv.URL, ""))
			return err, 0
		}, func(err error) bool { return errors.Is(err, context.Canceled) }},

		// Sent again later, the same request meets the same conflict: it
		// is refused, not declined.
		{"idempotency conflict", func(t *testing.T) (error, int) {
			ledger, _ := newLedgerOnFakeClock(t, &ledger.Memory{})
			srv := newOrdersServer(t, always(orderApply))
			client, _ := newLedgerClient(t, ledger, nil)
			if _, _, err := postKeyed(t, client, srv.url(), "k-conf", `{"item":"book"}`); err != nil {
				t.Fatalf("the first call: %v", err)
			}
			_, _, err := postKeyed(t, client, srv.url(), "k-conf", `{"item":"other"}`)
			return err, int(srv.posts.Load()) - 1
		}, func(err error) bool { return errors.Is(err, ErrIdempotencyConflict) }},

		{"already applied, its result not stored", func(t *testing.T) (error, int) {
			srv := stallingServer(t, 1)
			tr := newDeclinedTransport(t, &Transport{Retry: RetryPolicy{AttemptTimeout: 100 * time.Millisecond}})
			rec := uncertainPOST(t, tr, srv.URL, "k-applied")
			if err := rec.Resolve(context.Background(), true); err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			req := newRequest(t, testCtx(t), http.MethodPost, srv.URL, "order")
			req.Header.Set("Idempotency-Key", "k-applied")
			_, _, err := do(tr, req)
			return err, srv.Requests() - 1
		}, func(err error) bool { return errors.Is(err, ErrAlreadyApplied) && !errAs[*ReconcileRequiredError](err) }},

		{"invalid policy", func(t *testing.T) (error, int) {
			srv := statusServer(t, http.StatusOK, "ok")
			tr := &Transport{Load: LoadPolicy{MaxInFlight: -1}}
			_, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
			return err, 0
		}, func(err error) bool { return errors.Is(err, ErrInvalidPolicy) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err, _ := tt.call(t)
			if err == nil {
				t.Fatal("got no error, want one")
			}
			if !tt.match(err) {
				t.Errorf("got %v, want the %s error", err, tt.name)
			}
			if errors.Is(err, ErrDeclined) {
				t.Errorf("errors.Is(%v, ErrDeclined) = true, want false: the dependency failed, or the caller stopped", err)
			}
		})
	}
}

func TestDeclinedSentinelsAndTypes(t *testing.T) {
	declinedErrs := []error{
		ErrBudgetExhausted, ErrCircuitOpen, &breaker.OpenError{Scope: "dep"},
		&BulkheadFullError{Scope: "dep", MaxInFlight: 8}, &RateLimitError{Scope: "dep", RetryAfter: time.Second},
		&BulkheadFullError{Scope: "dep", MaxInFlight: 3, Learnt: true}, throttle.ErrThrottled, &throttle.Error{Scope: "dep", Share: 0.5},
		ErrDeadline, ErrDuplicateInFlight, ErrLedgerUnavailable,
		&RetryError{Reason: ErrBudgetExhausted, Last: errors.New("connection refused"), Attempts: 1},
		&url.Error{Op: "Get", URL: "http://dep", Err: &BulkheadFullError{Scope: "dep"}},
	}
	for _, err := range declinedErrs {
		if !errors.Is(err, ErrDeclined) {
			t.Errorf("errors.Is(%v, ErrDeclined) = false, want true", err)
		}
	}
	failures := []error{
		ErrAttemptsExhausted, ErrNotRepeatable, ErrFailureStreak, ErrCallCost,
		&RetryError{Reason: ErrAttemptsExhausted, Last: errors.New("connection refused"), Attempts: 3},
		&ReconcileRequiredError{Method: http.MethodPost, Cause: context.DeadlineExceeded},
		ErrIdempotencyConflict, ErrAlreadyApplied, &RetryError{Reason: ErrAlreadyApplied},
		context.Canceled, context.DeadlineExceeded, ErrInvalidPolicy, ErrAttemptTimeout,
		&StatusError{StatusCode: http.StatusServiceUnavailable},
	}
	for _, err := range failures {
		if errors.Is(err, ErrDeclined) {
			t.Errorf("errors.Is(%v, ErrDeclined) = true, want false", err)
		}
	}
}

func TestReasonNameOfStackRefusals(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{&BulkheadFullError{Scope: "dep", MaxInFlight: 8}, "bulkhead_full"},
		{&RateLimitError{Scope: "dep", RetryAfter: time.Second}, "rate_limited"},
		{fmt.Errorf("attempt: %w", &RateLimitError{}), "rate_limited"},
		{&throttle.Error{Scope: "dep", Share: 0.5}, "throttled"},
		{ErrLedgerUnavailable, "ledger_unavailable"},
		{&breaker.OpenError{Scope: "dep"}, "circuit_open"},
		{ErrDeclined, "other"},
	}
	for _, tt := range tests {
		if got := ReasonName(tt.err); got != tt.want {
			t.Errorf("ReasonName(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}
