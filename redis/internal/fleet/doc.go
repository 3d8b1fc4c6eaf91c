// Package fleet runs keyed writes exactly once through faults, with real
// processes: servers behind the idempotency middleware on one Redis
// ledger (each a process of its own, see Serve), a fault proxy in front of
// them (resets after the server applied, stalls, truncated bodies, 503s),
// and callers through one retryfuse.Transport; while they run, Redis may
// be paused (SIGSTOP) and killed and restarted with its append-only file.
//
// How often each write was applied is read from the servers' own record
// of their effects (a file per server, appended by the handler as it
// applies a write), never from the callers. The test in this package runs
// a short load under go test; the command redis/cmd/exactlyonce runs the
// full one and prints its figures.
package fleet
