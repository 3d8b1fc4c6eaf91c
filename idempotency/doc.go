// Package idempotency is the server half of Idempotency-Key: an
// http.Handler middleware that runs a keyed request at most once and
// answers a repeat with the response of the first, on the same
// ledger.Ledger contract as retryfuse's client, and with the same
// fingerprint of a request. It implements the IETF draft "The
// Idempotency-Key HTTP Header Field",
// draft-ietf-httpapi-idempotency-key-header-07 (cited below as "the
// draft", by section: 2.1 Syntax, 2.2 Uniqueness of Idempotency Key, 2.3
// Idempotency Key Validity and Expiry, 2.4 Idempotency Fingerprint, 2.6
// Idempotency Enforcement, 2.7 Error Handling, 5 Security
// Considerations).
//
//	h, err := idempotency.New(mux, idempotency.Config{
//		Ledger: ledger,
//		// The principal your authentication verified: keys are one per
//		// principal, and a principal's refreshed token gets its replay.
//		Scope: func(r *http.Request) string { return auth.Subject(r.Context()) },
//	})
//	if err != nil { ... }
//	srv := &http.Server{Handler: h}
//
// Wrap the whole mux, outside any http.StripPrefix: the fingerprint holds
// the path the client sent.
//
// # What it does
//
// A request it handles is one of Config.Methods (POST and PATCH unless
// set) for which Config.Route, if set, returns true; any other request
// goes to the next handler untouched. A request it handles:
//
//   - without a key: 400, ProblemKeyMissing (draft Section 2.7), unless
//     Config.KeyOptional;
//   - with a malformed key: 400, ProblemKeyMalformed (Sections 2.1, 5);
//   - with a body longer than Config.MaxBodyBytes (1 MiB): 413,
//     ProblemBodyTooLarge, nothing run;
//   - when the Ledger cannot answer: 503, ProblemLedgerUnavailable, with
//     Retry-After; nothing run (it fails closed);
//   - first under its key: the key is claimed, the next handler runs, with
//     the body the middleware read, and its response (status, header,
//     body up to Config.MaxStoredBody) is stored under the key when it
//     returns (Section 2.6, first time request);
//   - a repeat while the first runs: 409, ProblemInFlight, with
//     Retry-After (Section 2.7);
//   - a repeat after the first completed: the stored response, marked
//     HeaderReplayed (Section 2.6, retry); a 4xx or 5xx the handler
//     wrote is a result too, and is replayed;
//   - a repeat with another fingerprint (another body, method, path or
//     query), or with other credentials (see "Keys and principals"):
//     422, ProblemKeyReused (Sections 2.2, 2.7, 5), whatever the state of
//     the first;
//   - a repeat after a first whose outcome is unknown: 409,
//     ProblemOutcomeUnknown (see below);
//   - a repeat after a first whose response was not stored: 409,
//     ProblemNotStored.
//
// Every response to a request it handles carries HeaderHonoured. Every
// refusal is a problem details object (RFC 9457, application/problem+json)
// with a type of its own (the Problem constants), a title, the status, and
// a detail that names the draft's section. The next handler never runs
// twice for one key (unless Config.RerunUncertain, below), whatever the
// number of concurrent requests and of servers sharing the Ledger.
//
// # The key
//
// The draft defines the key as a Structured Field String (RFC 8941):
// Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324". Clients send
// the bare form too (retryfuse's client does): Idempotency-Key:
// 8e03978e-40d5-43e8-bc93-6894a57f9324. Both are accepted, and name the
// same key when what they carry is equal. A key is 1 to MaxKeyLen (255)
// bytes of visible ASCII and spaces; X-Idempotency-Key is read as well
// (sent with Idempotency-Key, the two must agree).
//
// # Keys and principals
//
// A stored response belongs to the principal whose request made it: it
// may hold their data, and replaying it to another is a leak (draft
// Section 5). The middleware tells principals apart in two ways:
//
//   - Config.Scope, the principal the application verified (the subject
//     of its Authorization, a tenant): keys are one only within a scope,
//     so that two principals who chose the same key each run their own
//     request. This is the way to set: with it, a principal whose token
//     was refreshed, or whose API key was rotated, keeps its key and gets
//     its replay.
//   - Without a Scope (every request in one scope), the credentials a
//     request carries (Config.Credentials: Authorization by default, and
//     the cookies or headers named) are part of its fingerprint, as a
//     keyed hash. A repeat that carries other credentials (another
//     principal's, none, or this principal's refreshed token) is refused
//     with 422 (ProblemKeyReused), whatever the state of the first
//     request: nothing is replayed and the handler does not run, so that
//     a rotated token costs a visible refusal, never a second effect nor
//     another's response. A caller then checks the resource and sends the
//     write under a key of its own if it was not done.
//
// Only a keyed hash (HMAC-SHA-256) of the credentials is stored, folded
// into the fingerprint with the request, never the credentials. Its key
// is public unless Credentials.Key is set: see retryfuse.Credentials for
// what that hides, and for the rotation of the key (PreviousKeys). A
// request that carries none of the credentials named keeps the
// fingerprint it had before credentials were bound, so keys stored by
// an earlier release keep their answers for such requests; keys stored by
// one for requests with Authorization are refused (422) until the
// Ledger's TTL, safely.
//
// Set-Cookie is never stored, nor any header named in
// Config.UnstoredHeaders: the first response carries them, a replay does
// not. A session the server gave the first caller is not the Ledger's to
// keep (the Ledger holds no secret), and a replay, to whoever it goes,
// never grants one; a client that needs the session after a replay gets
// it the way it got it first (signing in), not from a key.
//
// # The fingerprint
//
// A key is stored with the fingerprint of its request: SHA-256 over the
// method, the escaped URL path, the raw query and the body, computed as
// retryfuse's Transport computes it (see ledger.Fingerprint and
// FingerprintOf), so both halves give the same value for the same
// request: POST /transfer?to=bob under the key of POST /transfer?to=alice
// is refused (422), not given alice's response. The host and the header
// are left out: they carry per-attempt values (signatures, timestamps,
// trace ids); only the credentials named are bound into it (see above). Where the query does too, Config.Fingerprint narrows it.
// The body is read whole before the handler runs, at most
// Config.MaxBodyBytes, and the handler reads that copy.
//
// # Outcomes the draft does not foresee
//
// The draft assumes that a request under a key ends with a response to
// replay. Two ends have none, and get a 409 of their own type, so that a
// client does not take them for "in flight, come back later":
//
//   - A handler that panics (or calls runtime.Goexit) may have applied
//     its effect: the key is left uncertain (Ledger.Uncertain), the panic
//     goes on, and a repeat gets ProblemOutcomeUnknown (no Retry-After:
//     the key stays so until the Ledger's TTL). A claim that expires (a
//     server that died mid-request; the Ledger's InFlightTTL) ends the
//     same way. With Config.RerunUncertain, the handler, declared safe to
//     run again, runs instead.
//   - A response that is not stored (a body over Config.MaxStoredBody, a
//     header over 100 values or 32 KiB, trailers, a connection taken over
//     with Hijack) completes the key without a stored response; a repeat
//     gets ProblemNotStored: the effect happened, and is not run again.
//
// A client that goes away mid-request changes nothing: the handler's
// outcome decides, and what it wrote (the writes failing) is stored when
// it returns. The Ledger steps that record an outcome run detached from
// the request's cancellation, each bounded by 5 seconds.
//
// # The transactional mode, and the calls a handler makes
//
// Where the handler's effects live in the database that holds the keys,
// give Config.Ledger a TxLedger (retryfusesql's Ledger.Transactional):
// the key's claim, the handler's effects, written in the request's
// transaction (Tx), and its recorded response then commit in one
// transaction. Anything before the commit (a panic, a server killed, a
// connection to the database lost) leaves nothing: the key is free, the
// effects absent, and a repeat runs the handler once; after the commit a
// repeat gets the stored response. No key is left uncertain, and neither
// of the 409s above (outcome unknown, not stored) arises from a crash.
// The response is held until the commit, at most Config.MaxStoredBody
// of body (beyond it: rolled back, 500 ProblemResponseTooLarge). What
// the transaction cannot cover is outside the database: a call the
// handler makes to another service, a file, a message sent. For a call
// to another keyed API, Step gives a context whose requests retryfuse's
// Transport sends under a key derived from the request's scope and key
// and the step's name, the same on every run of the handler for that
// request: a run after a crash sends the call again under the same key,
// and a downstream that honours keys applies it once. A call to a
// service that does not honour keys stays at-least-once. See TxLedger.
//
// # Where it differs from the draft, and why
//
//   - It accepts the bare form of the key besides the sf-string, and
//     X-Idempotency-Key: clients send them today.
//   - It refuses an sf-string with parameters (400): the draft defines
//     none, and a key read two ways is worse than a refusal.
//   - It bounds keys to 255 bytes (the draft sets no bound): every key is
//     stored.
//   - The fingerprint covers the method and the path as well as the
//     payload (Section 2.4 leaves it to the resource): a key reused for
//     another operation gets 422 rather than the other's response.
//   - 413 for a body too long to fingerprint, 503 for a Ledger that
//     cannot answer, and the two 409s above: cases the draft leaves to
//     "other errors" or does not foresee.
//   - Problem details follow RFC 9457, which obsoletes the RFC 7807 the
//     draft cites; the type is a URI of this package's documentation
//     rather than a site of the server's, and no Link header is sent.
//   - Keys expire after the Ledger's TTL (24h by default), which the
//     resource should publish (Section 2.3).
//   - Without a Scope, a repeat must carry the credentials of the first
//     request (Section 5 asks that keys be kept per client; the draft
//     says nothing of a principal's changed credentials), and
//     Set-Cookie is never replayed.
//
// # Streaming and protocols
//
// The handler writes through the middleware as it would to the server:
// Flush passes through (http.Flusher, and http.ResponseController, which
// reaches the server's ResponseWriter through Unwrap), over HTTP/1 and
// HTTP/2. The stored response is recorded as it goes; only a response
// within MaxStoredBody is kept. A replay writes the stored body in one
// piece.
package idempotency
