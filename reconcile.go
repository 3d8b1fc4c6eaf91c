package retryfuse

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/keymemory"
)

// A Reconciler is asked, when the decision core requires reconciliation,
// whether an uncertain write took effect — typically by looking the effect
// up by err.IdempotencyKey. It runs on the caller's goroutine with the
// caller's context, so its time counts against the caller's deadline. A
// request it sends through the same Transport is not repeated (the context
// carries no retry ownership, but keep lookups idempotent: a GET). A type
// with a method of this shape is passed as a method value.
//
// It answers one of three ways:
//
//   - applied true, with resp the authoritative result (for example the
//     resource looked up by its idempotency key): the caller receives resp
//     and closes its body;
//   - applied false, with a nil resp and a nil error: the effect is known
//     not to have happened, and the request may be sent again through the
//     usual gates (request safety, attempts, budget, breaker, deadline);
//   - an error: the effect could not be established, and the
//     *ReconcileRequiredError goes back to the caller.
//
// Anything else — an error, a panic, applied without a response, a
// response without applied — counts as not established: the reconcile
// error goes back, never a replay.
//
// With a Ledger, an Applied call completes its key without a stored result
// (the lookup's response is not the write's own answer): later calls under
// the key get a *ReconcileRequiredError rather than the lookup replayed. A
// lookup sent through a Transport with the same Ledger must not carry the
// write's idempotency key: it would be refused as a conflict (another
// method and path); look the effect up by a query or a path instead.
type Reconciler func(ctx context.Context, rec *ReconcileRequiredError) (resp *http.Response, applied bool, err error)

// reconcileError builds the error for an uncertain write of this call,
// which the Reconcile hook reports (reconcile).
func (c *call) reconcileError(cause error) *ReconcileRequiredError {
	return &ReconcileRequiredError{
		Method:         c.method,
		URL:            c.redactedURL(),
		IdempotencyKey: c.key.value,
		KeyGenerated:   c.key.generated,
		Attempts:       c.attempt,
		Phase:          c.phase,
		At:             c.now(),
		Cause:          cause,
		resolve:        c.resolver(),
	}
}

// resolver returns what Resolve does for the call's key: end the
// ledger's uncertain claim on it, or, without a ledger, update the
// Transport's memory. Nil when nothing is held under a key of the call.
func (c *call) resolver() func(ctx context.Context, applied bool) error {
	keys, clock := &c.t.keys, c.p.clock
	switch {
	case c.ledgerKey != "":
		l, key, token := c.p.ledger, c.ledgerKey, c.ledgerToken
		if token == "" {
			token = c.heldToken
		}
		if token == "" {
			return nil
		}
		return func(ctx context.Context, applied bool) error {
			ctx, cancel := ledgerStepContext(ctx)
			defer cancel()
			var err error
			if applied {
				err = l.Complete(ctx, key, token, nil)
			} else {
				err = l.Release(ctx, key, token)
			}
			if err == nil {
				keys.Forget(key) // what was kept to describe the uncertain call
			}
			return err
		}
	case c.memoized:
		key := c.memo()
		return func(_ context.Context, applied bool) error {
			if applied {
				keys.Remember(key, keymemory.Memo{Applied: true}, clock.Now())
			} else {
				keys.Forget(key)
			}
			return nil
		}
	}
	return nil
}

// refuseUncertain returns a reconcile error about an earlier call under
// the key, whose write was left uncertain: this call sent nothing. The
// Reconciler is not asked (that call's own reconciliation was the time to
// ask); the Reconcile hook reports it.
func (c *call) refuseUncertain() *ReconcileRequiredError {
	e := c.reconcileError(nil)
	e.Earlier, e.scope = true, boundedScope(c.scopeName())
	e.Attempts, e.Phase, e.At = c.earlier.Attempts, c.earlier.Phase, c.earlier.At // zero: unknown
	if h := c.t.Hooks.Reconcile; h != nil {
		emit(h, ReconcileInfo{CallInfo: c.info(), Err: e, Resolution: resolutionUnknown})
	}
	return e
}

// refuseApplied refuses a call under a key that an earlier call applied,
// when no result of it is kept to replay.
func (c *call) refuseApplied(v decide.Verdict) error {
	c.giveUp(ErrAlreadyApplied, v)
	return &RetryError{Reason: ErrAlreadyApplied, Attempts: c.attempt, about: c.about()}
}

// about names the call's request and key, for a refusal under the key:
// the method, the URL without credentials, the key and its scope. The key
// is at most 255 bytes (a longer one is refused before), and the scope is
// cut to maxScopeInError bytes.
func (c *call) about() string {
	return c.method + " " + c.redactedURL() + ", idempotency key " + strconv.Quote(c.key.value) + " in scope " + boundedScope(c.scopeName())
}

// maxScopeInError bounds a scope named in an error: a Scope function may
// return a long name.
const maxScopeInError = 128

// boundedScope returns scope cut to maxScopeInError bytes, marked when cut.
func boundedScope(scope string) string {
	if len(scope) > maxScopeInError {
		return strings.ToValidUTF8(scope[:maxScopeInError], "") + "…"
	}
	return scope
}

// The answers a reconciliation reports (ReconcileInfo.Resolution).
const (
	resolutionUnknown    = "still_unknown"
	resolutionApplied    = "applied"
	resolutionNotApplied = "not_applied"
)

// reconciliation is what the Reconciler established.
type reconciliation struct {
	resolution string // one of the resolution constants
	resp       *http.Response
}

// reconcile asks the Reconciler, if any, about an uncertain write, with the
// caller's own context (its time counts against the caller's deadline; it
// carries no retry ownership, so its own requests are not passed through).
func (c *call) reconcile(e *ReconcileRequiredError) reconciliation {
	res := reconciliation{resolution: resolutionUnknown}
	if c.p.reconciler != nil {
		res = askReconciler(c.req.Context(), c.p.reconciler, e)
	}
	if h := c.t.Hooks.Reconcile; h != nil {
		emit(h, ReconcileInfo{CallInfo: c.info(), Err: e, Resolution: res.resolution})
	}
	return res
}

// askReconciler consults r, recovering a panic; anything but a usable
// answer leaves the outcome unknown.
func askReconciler(ctx context.Context, r Reconciler, e *ReconcileRequiredError) (res reconciliation) {
	var resp *http.Response
	defer func() {
		if recover() != nil {
			drain(resp, 0)
			res = reconciliation{resolution: resolutionUnknown}
		}
	}()
	resp, applied, err := r(ctx, e)
	switch {
	case err == nil && applied && resp != nil:
		return reconciliation{resolution: resolutionApplied, resp: resp}
	case err == nil && !applied && resp == nil:
		return reconciliation{resolution: resolutionNotApplied}
	}
	drain(resp, 0) // not a usable answer: release it
	return reconciliation{resolution: resolutionUnknown}
}
