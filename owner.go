package retryfuse

import (
	"context"
	"net/http"
)

// This file is the mark by which a Transport owns the repeating of a
// request, and what a call does with the caller's request body.

// ownedContext is a call's context marked with ownerKey. It lives inside
// the call, so marking costs no allocation.
type ownedContext struct {
	context.Context
	owner *Transport
}

func (c *ownedContext) Value(key any) any {
	if _, ok := key.(ownerKey); ok {
		return c.owner
	}
	return c.Context.Value(key)
}

// ownerKey marks, in an attempt's context, that a retryfuse Transport
// already owns the repeating of this request: a Transport beneath it (or
// called again beneath it through the context) passes each attempt
// through, so that stacked layers do not multiply load.
type ownerKey struct{}

// closeRequestBody closes the body of a request that will not be sent
// (again), as a RoundTripper must.
func closeRequestBody(req *http.Request) {
	if req != nil && req.Body != nil {
		_ = req.Body.Close()
	}
}
