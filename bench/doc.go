// Package bench holds side-by-side benchmarks of the success path (a first
// attempt that answers 200 or 201) through retryfuse's Transport, the bare
// net/http transport it wraps, and two peers: hashicorp/go-retryablehttp and
// failsafe-go's failsafehttp. Every client sends over a fresh
// cleanhttp.DefaultPooledTransport to one loopback server in the same
// process.
//
// The package has no code of its own: the benchmarks and the test that
// pins the clients' configuration are in bench_test.go; the script ./run
// runs the benchmarks and prints each client's medians and ratios to bare
// net/http. hedge_test.go compares hedged requests against a dependency
// with a slow tail (retryfuse beside failsafe-go's hedge policy); the script
// ./hedge runs it. middleware_test.go serves a small handler over
// loopback bare and behind the idempotency middleware and compares the
// two, interleaved call by call; the script ./middleware runs it.
// overload_test.go offers dependencies more than they take
// (a queue of workers, a quota answering 429, an outage and its return)
// through retryfuse's controls of load beside failsafe-go's adaptive
// limiter and adaptive throttler; the script ./overload runs it. The
// results are in the repository's BENCHMARKS.md. This module is never
// tagged.
package bench
