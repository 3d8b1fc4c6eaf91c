package retryfuse

import (
	"context"
	"fmt"
	"net/http"
)

// Resolution is a Reconciler's answer about an uncertain write.
type Resolution uint8

const (
	// StillUnknown: the effect could not be established; the
	// *ReconcileRequiredError goes back to the caller.
	StillUnknown Resolution = iota
	// Applied: the effect happened. The Reconciliation's Response is the
	// authoritative result and is returned to the caller.
	Applied
	// NotApplied: the effect did not happen. The request may be sent
	// again, through the usual gates (request safety, attempts, budget,
	// breaker, deadline).
	NotApplied
)

func (r Resolution) String() string {
	switch r {
	case StillUnknown:
		return "still_unknown"
	case Applied:
		return "applied"
	case NotApplied:
		return "not_applied"
	}
	return fmt.Sprintf("Resolution(%d)", uint8(r))
}

// Reconciliation is what a Reconciler found.
type Reconciliation struct {
	Resolution Resolution
	// Response is the authoritative result when Resolution is Applied (for
	// example the resource looked up by its idempotency key). It must not
	// be nil then. The caller of RoundTrip receives it and closes its body.
	Response *http.Response
}

// A Reconciler is asked, when the decision core requires reconciliation,
// whether an uncertain write took effect — typically by looking the effect
// up by err.IdempotencyKey. It runs on the caller's goroutine with the
// caller's context, so its time counts against the caller's deadline. A
// request it sends through the same Transport is not repeated (the context
// carries no retry ownership, but keep lookups idempotent: a GET). A type
// with a method of this shape is passed as a method value.
//
// An error, a panic, or an Applied without a Response counts as
// StillUnknown: the reconcile error goes back, never a replay.
//
// With a Ledger, an Applied call completes its key without a stored result
// (the lookup's response is not the write's own answer): later calls under
// the key get a *ReconcileRequiredError rather than the lookup replayed. A
// lookup sent through a Transport with the same Ledger must not carry the
// write's idempotency key: it would be refused as a conflict (another
// method and path); look the effect up by a query or a path instead.
type Reconciler func(ctx context.Context, err *ReconcileRequiredError) (Reconciliation, error)

// reconcileError builds the error for an uncertain write. The Reconcile
// hook reports it: reconcile, for a write of this call; refuseUncertain,
// for a key left uncertain or unreplayable by an earlier call.
func (c *call) reconcileError(cause error) *ReconcileRequiredError {
	return &ReconcileRequiredError{
		Method:         c.method,
		URL:            c.redactedURL(),
		IdempotencyKey: c.key.value,
		KeyGenerated:   c.key.generated,
		Attempts:       c.attempt,
		Phase:          c.phase,
		Cause:          cause,
		resolve:        c.resolver(),
	}
}

// resolver returns what Resolve does for the call's key: end the
// ledger's uncertain claim on it, or, without a ledger, update the
// Transport's memory. Nil when nothing is held under a key of the call.
func (c *call) resolver() func(ctx context.Context, applied bool) error {
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
			if applied {
				return l.Complete(ctx, key, token, nil)
			}
			return l.Release(ctx, key, token)
		}
	case c.memoKey != "":
		keys, key, clock := &c.t.keys, c.memoKey, c.p.clock
		return func(_ context.Context, applied bool) error {
			if applied {
				keys.remember(key, true, clock.Now())
			} else {
				keys.forget(key)
			}
			return nil
		}
	}
	return nil
}

// refuseUncertain returns a reconcile error about an earlier call under
// the key, without asking the Reconciler (that call's own reconciliation
// was the time to ask), and reports it.
func (c *call) refuseUncertain(cause error) *ReconcileRequiredError {
	e := c.reconcileError(cause)
	if h := c.t.Hooks.Reconcile; h != nil {
		emit(h, ReconcileInfo{CallInfo: c.info(), Err: e, Resolution: StillUnknown})
	}
	return e
}

// reconcile asks the Reconciler, if any, about an uncertain write, with the
// caller's own context (its time counts against the caller's deadline; it
// carries no retry ownership, so its own requests are not passed through).
func (c *call) reconcile(e *ReconcileRequiredError) Reconciliation {
	var res Reconciliation
	if c.p.reconciler != nil {
		res = askReconciler(c.req.Context(), c.p.reconciler, e)
	}
	if h := c.t.Hooks.Reconcile; h != nil {
		emit(h, ReconcileInfo{CallInfo: c.info(), Err: e, Resolution: res.Resolution})
	}
	return res
}

// askReconciler consults r, recovering a panic; anything but a usable
// answer is StillUnknown.
func askReconciler(ctx context.Context, r Reconciler, e *ReconcileRequiredError) (rec Reconciliation) {
	defer func() {
		if recover() != nil {
			rec = Reconciliation{}
		}
	}()
	rec, err := r(ctx, e)
	switch {
	case err != nil:
		return Reconciliation{}
	case rec.Resolution == Applied && rec.Response == nil:
		return Reconciliation{}
	case rec.Resolution != Applied && rec.Response != nil:
		drain(rec.Response, 0) // not the caller's result: release it
		rec.Response = nil
	}
	return rec
}
