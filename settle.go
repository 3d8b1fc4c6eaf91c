package retryfuse

import "context"

// This file is how a caller settles a write left uncertain (a
// *ReconcileRequiredError), besides Resolve: the lookups it sends are
// marked Reconciling, which the throttle of new calls never refuses; and
// toward a server known to honour Idempotency-Key, Repeat lets the write
// be sent again under its key, for the server to answer with its stored
// result or run it once, with no lookup of the caller's own.

// Repeat lets the next call under the write's idempotency key be sent,
// toward a server known to honour Idempotency-Key (KeyPolicy.ServerHonours,
// or learnt from its marker): the Transport stops holding the key (in its
// memory, or the Ledger's uncertain claim), and the server answers the
// repeat with the stored result of the request it took, or runs it once
// if it took none. Send the same request, same key and body, after it:
//
//	var rec *retryfuse.ReconcileRequiredError
//	if errors.As(err, &rec) && rec.Repeat(ctx) == nil {
//		resp, err = client.Do(sameRequestAgain) // same key, same body
//	}
//
// Toward any other server the key stays held, and Repeat returns an error
// matching ErrNotRepeatable: look the effect up, then Resolve. So it does
// when the server, known to honour keys when the write was left uncertain,
// no longer is when Repeat is called: what was learnt of it expired
// (KeyPolicy.HonourMemory), or a response without the marker revoked it. A write
// without an idempotency key of its own (none, or a generated one) cannot
// be repeated either. Like Resolve, Repeat works after the caller's
// deadline (ctx gives its values, not its cancellation, to a Ledger's
// step), and returns a Ledger's error.
func (e *ReconcileRequiredError) Repeat(ctx context.Context) error {
	if e.honours == nil || !e.honours() || e.KeyGenerated || e.IdempotencyKey == "" {
		return &RetryError{Reason: ErrNotRepeatable, about: e.Method + " " + e.URL +
			": its server is not known to honour idempotency keys; look the effect up, then Resolve"}
	}
	if e.resolve == nil {
		return nil // nothing held
	}
	return e.resolve(ctx, false)
}

// reconcilingKey marks a context as Reconciling's.
type reconcilingKey struct{}

// Reconciling returns a copy of ctx that marks the requests sent with it
// as settling an uncertain write: the lookup of its effect after a
// *ReconcileRequiredError, or its repeat under the same key. The throttle
// of new calls (LoadPolicy.Throttle) never refuses such a request: it
// sheds new work, and a refused lookup leaves the write uncertain for
// longer. Every other gate applies as usual. A Reconciler's ctx is so
// marked already.
func Reconciling(ctx context.Context) context.Context {
	return context.WithValue(ctx, reconcilingKey{}, true)
}

// reconciling reports whether ctx is marked by Reconciling.
func reconciling(ctx context.Context) bool {
	v, _ := ctx.Value(reconcilingKey{}).(bool)
	return v
}
