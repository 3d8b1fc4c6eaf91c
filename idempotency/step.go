package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/retryfuse/retryfuse"
)

// This file is the keys of the calls a handler makes: each derived from
// the incoming request's key and the step, so that a run of the handler
// again sends the same downstream keys.

// ErrNotKeyed is returned by Step and StepKey for a context that is not
// of a request whose key the middleware claimed (a request it passed
// through, one without a key under Config.KeyOptional, or a context made
// elsewhere): there is no key to derive a step's key from.
var ErrNotKeyed = errors.New("idempotency: the context is not of a request under a key claimed by the middleware")

// stepRootKey is the context key of the request's scope and key.
type stepRootKey struct{}

// stepRoot is what the keys of a request's steps are derived from.
type stepRoot struct{ scope, key string }

// withStepRoot returns ctx carrying the scope and key of lkey, the
// ledger's key (scope, NUL, key: the key holds no NUL).
func withStepRoot(ctx context.Context, lkey string) context.Context {
	i := strings.LastIndexByte(lkey, 0)
	return context.WithValue(ctx, stepRootKey{}, stepRoot{scope: lkey[:i], key: lkey[i+1:]})
}

// StepKey returns the idempotency key of the step called name of the
// request whose context is ctx, for a call the handler makes to another
// keyed API: 64 hex digits of SHA-256 over the request's scope, its
// idempotency key and name, each prefixed with its length, so that the
// key is the same on every run of the handler for that request (after a
// crash in the transactional mode, a Release, a rerun under
// Config.RerunUncertain) and never the same for another scope, key or
// step. An empty name is an error wrapping retryfuse.ErrInvalidIdempotencyKey; a
// context not of a keyed request behind the middleware, ErrNotKeyed.
func StepKey(ctx context.Context, name string) (string, error) {
	if name == "" {
		return "", errors.Join(retryfuse.ErrInvalidIdempotencyKey, errors.New("idempotency: a step needs a name"))
	}
	root, ok := ctx.Value(stepRootKey{}).(stepRoot)
	if !ok {
		return "", ErrNotKeyed
	}
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	for _, part := range [...]string{"retryfuse step v1", root.scope, root.key, name} {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(part)))])
		h.Write([]byte(part))
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Step returns a copy of ctx that carries the key of the step called
// name (StepKey) as the idempotency key of the calls made with it:
// retryfuse's Transport sends a request with that context that carries
// no key of its own under that key (retryfuse.WithIdempotencyKey).
//
// A step is the handler's recovery point for the call: when the handler
// runs again for the same request, the call is sent again under the same
// key, and a downstream API that honours keys applies it once and
// answers with its first result. Name each call of a run apart (a name
// per step, "charge-card", "send-receipt"; an index for calls made in a
// loop), and never reuse a name for a call with another payload: the
// downstream refuses it (422) as a key reused.
//
//	ctx, err := idempotency.Step(r.Context(), "charge-card")
//	if err != nil { ... }
//	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, paymentsURL, body)
//	resp, err := client.Do(req) // client.Transport is a *retryfuse.Transport
//
// Errors are StepKey's.
func Step(ctx context.Context, name string) (context.Context, error) {
	key, err := StepKey(ctx, name)
	if err != nil {
		return ctx, err
	}
	return retryfuse.WithIdempotencyKey(ctx, key), nil
}
