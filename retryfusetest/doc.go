// Package retryfusetest is a test kit for the failures retryfuse exists
// for: a response lost after the write was applied, a connection reset
// before the server read it, a stall, a 429 or 503 with or without
// Retry-After, a slow or cut body, an HTTP/2 stream reset. A test scripts
// them in a line and asks an effect recorder which idempotency keys were
// applied, how often and with which bodies. It imports the standard
// library alone.
//
// # Faults
//
// A Fault is what happens to one request; a script is the faults in the
// order requests meet them, Answer after the last:
//
//	Answer()             the handler runs; its response is delivered
//	Refuse()             the connection is refused: nothing written (pre_write)
//	ResetBeforeRead()    reset after the write, before the server read it: nothing applied
//	ApplyThenReset()     the handler runs, its response is lost to a reset
//	ApplyThenClose()     the handler runs, the connection is closed (io.EOF)
//	StallBeforeApply()   held unread until the client gives up
//	ApplyThenStall()     the handler runs, its response held until the client gives up
//	Status(503)          the status, an empty body, no Retry-After; the handler does not run
//	RetryAfter(429, d)   status with Retry-After in seconds; the handler does not run
//	RetryAfterDate(503, d) the same with an HTTP date
//	SlowBody(every)      the body one byte per interval
//	TruncatedBody(n)     the body cut after n bytes (io.ErrUnexpectedEOF)
//	StreamReset()        an HTTP/2 RST_STREAM (INTERNAL_ERROR) before the handler
//
// The script runs in one of three places:
//
//   - Transport, an http.RoundTripper in memory: the handler runs on the
//     caller's goroutine, no socket, no goroutine that outlives the call. Give it to a
//     retryfuse.Transport as its Base. It shows the facts a real wire shows
//     (httptrace's GetConn, GotConn, WroteRequest; net/http's errors), so
//     the retryfuse Transport above judges each attempt as it would on a
//     network: tested fault by fault against a Server. It runs inside a
//     testing/synctest bubble.
//   - Server, an httptest server on a loopback socket (NewHTTP2Server for
//     HTTP/2 over TLS), for behaviour that depends on the wire: net/http's
//     own re-sends, connection reuse, TCP resets. Not in a bubble: a
//     goroutine blocked on a socket is not durably blocked.
//   - Handler, a handler to mount in a server of one's own, or inside a
//     middleware: ApplyThenReset inside the idempotency middleware is a
//     crash between the effect and the middleware's record of it.
//
// # Effects
//
// A Recorder wraps the handler that applies the effect (inside any
// middleware that may answer without running it) and records each run
// under the request's Idempotency-Key. Its assertions take a testing.TB:
//
//	charges.AtMostOnce(t)            // no key applied twice
//	charges.ExactlyOnce(t, "order-42")
//	charges.NotApplied(t, "order-43")
//
// # Time
//
// Inside a testing/synctest bubble, time is the test's: a retryfuse
// Transport over a fault Transport waits its backoffs and Retry-After
// delays, times its attempts out, keeps its breaker open and its
// ledger.Memory keys on the bubble's clock, so a 30 s Retry-After passes in
// no wall time. Make the retryfuse Transport (and its Breaker, budgets and
// ledger.Memory) inside the bubble: a bubble's clock starts at midnight
// UTC, 1 January 2000, and state first used on the real clock would read
// it as time gone backwards (a key held, a breaker open, for years). What
// cannot run in a bubble: a real socket (a Server, the default Base, the
// Redis and SQL modules' stores), whose goroutines block on I/O the
// bubble does not count as waiting.
package retryfusetest
