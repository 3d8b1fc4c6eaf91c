package idempotency

import "net/http"

// This file is how a handler frees its key: for a failure it answered
// before doing anything.

// Release tells the middleware that the handler writing to w did nothing
// under its request's key: when the handler returns, the key is freed
// (Ledger.Release) instead of completed, its response sent to the client
// as written but not stored, and a repeat under the key runs the handler
// afresh. Call it for a failure answered before any effect (a dependency
// down, a 503 for overload, a 429 of the handler's own rate limit): the
// client may then repeat the request under the same key and have it run.
// Never call it once an effect may have happened: a repeat would apply it
// again. Without Release, every response is stored and replayed, errors
// included (the draft's default, and the way large payment APIs behave).
//
// It reports whether w is the ResponseWriter of a request whose key the
// middleware claimed (directly, or wrapped by middleware that has an
// Unwrap method, as for http.ResponseController); false means there is
// no key to free, and nothing changed. It may be called at any time
// before the handler returns, and more than once.
func Release(w http.ResponseWriter) bool {
	for w != nil {
		if rec, ok := w.(*recorder); ok {
			rec.released = true
			return true
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return false
		}
		w = u.Unwrap()
	}
	return false
}
