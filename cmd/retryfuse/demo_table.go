package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/breaker"
)

// printTable prints what was measured, side by side.
func printTable(w io.Writer, cfg demoConfig, r demoResults) error {
	t := &table{w: w}
	t.line("retryfuse demo: a plain retry loop against retryfuse, on local servers (127.0.0.1)")
	t.line("Both sides: %d attempts, backoff from %s doubling to %s (full jitter), %s per attempt",
		demoAttempts, demoInitialBackoff, demoMaxBackoff, demoAttemptTimeout)
	t.line("(%s in the lost-response scenario).", lostAttemptTimeout)
	t.line("The plain loop retries any error and any 5xx, and waits as long as Retry-After says.")
	t.line("Every number below was measured in this run.")

	s := r.Storm
	t.section(fmt.Sprintf("1. Storm: %d concurrent callers; the dependency answers 503 to every request", s.Callers))
	t.row("requests the dependency received", s.PlainSent, s.FuseSent)
	t.row("requests per caller (amplification)", fmt.Sprintf("%.2f", s.PlainPerCaller()), fmt.Sprintf("%.2f", s.FusePerCaller()))
	t.row("callers that got the 503 back", s.PlainGot503, s.FuseGot503)
	t.row("callers refused before sending", 0, s.FuseThrottled)
	t.row("time until every caller had an answer", dur(s.PlainElapsed), dur(s.FuseElapsed))
	b := s.FuseBudget
	t.note("retryfuse's defaults refuse no call before sending: the retry budget stops retries, never a first attempt")
	t.note("(the throttle of new calls, Load.Throttle, is off unless asked for)")
	t.note("retryfuse's per-host ratio budget (Snapshot): %d calls recorded (one first attempt each; not the refused),", b.Requests)
	t.note("%d retries granted, %d retries refused, %.1f retries available now", b.Retries, b.Refused, b.Available)
	t.note("retryfuse sent %d first attempts + %d retries = %d requests; the dependency counted %d of them",
		b.Requests, b.Retries, b.Requests+b.Retries, s.FuseSent)

	l := r.Lost
	t.section(fmt.Sprintf("2. Lost response: a keyed POST; the server applies it, then stalls past the %s attempt timeout", lostAttemptTimeout))
	t.row("times the payment was applied", l.PlainApplied, l.FuseApplied)
	t.row("what the caller got", l.PlainOutcome, l.FuseOutcome)
	t.row("time until the caller had an answer", dur(l.PlainElapsed), dur(l.FuseElapsed))
	if e := l.Reconcile; e != nil {
		t.note("retryfuse: not replayed after %d attempt (phase %s, idempotency key %q)", e.Attempts, e.Phase, e.IdempotencyKey)
		t.note("reconciled by GET /payments/%s: applied %d time(s), so the payment stands and is not sent again", e.IdempotencyKey, l.LookupApplied)
	}

	a := r.RetryAfter
	t.section(fmt.Sprintf("3. Retry-After: 3600 on a 503; the caller's deadline is %s", dur(a.Deadline)))
	t.row("time until control came back", dur(a.PlainElapsed), dur(a.FuseElapsed))
	t.row("what the caller got", a.PlainOutcome, a.FuseOutcome)
	t.row("requests the server received", a.PlainSent, a.FuseSent)
	if a.FuseReason != nil {
		t.note("retryfuse gave up at once: %s (cap %s, the default MaxRetryAfter)", retryfuse.ReasonName(a.FuseReason), 30*time.Second)
	}

	k := r.Brake
	t.section(fmt.Sprintf("4. Brake: the dependency is down for the first %s, then up; a call arrives every %s for %s",
		dur(k.DownFor), dur(k.Every), dur(k.RunFor)),
		"plain loop", "retryfuse + Breaker", "retryfuse, budget only")
	t.row("calls made", k.Plain.Calls, k.Breaker.Calls, k.Budget.Calls)
	t.row("requests received while it was down", k.Plain.SentDown, k.Breaker.SentDown, k.Budget.SentDown)
	t.row("requests received after it recovered", k.Plain.SentUp, k.Breaker.SentUp, k.Budget.SentUp)
	t.row("calls failed fast (circuit open)", k.Plain.FastFails, k.Breaker.FastFails, k.Budget.FastFails)
	t.row("first 200 a caller got, from the start", at(k.Plain.FirstOK), at(k.Breaker.FirstOK), at(k.Budget.FirstOK))
	t.note("breaker transitions (BreakerChange hook; OpenTimeout %s; the dependency recovered at %s):", dur(k.OpenTimeout), at(k.DownFor))
	for _, tr := range k.Transitions {
		t.note("  %-9s %-9s -> %-9s  %s", at(tr.At), tr.From, tr.To, why(tr))
	}
	h := r.Tail
	t.section(fmt.Sprintf("5. Tail latency: %d sequential GETs; 1 request in %d (5%%, seeded) is held %s, the rest answered at once",
		h.Calls, tailSlowEvery, dur(tailSlowFor)),
		"plain client", "hedge after 20ms", "hedge at observed p95")
	t.row("p50 latency", dur(h.Plain.P50), dur(h.Fixed.P50), dur(h.Derived.P50))
	t.row("p99 latency", dur(h.Plain.P99), dur(h.Fixed.P99), dur(h.Derived.P99))
	t.row("requests the dependency received", h.Plain.Sent, h.Fixed.Sent, h.Derived.Sent)
	t.row("extra requests", pct(h.Plain.Extra(h.Calls)), pct(h.Fixed.Extra(h.Calls)), pct(h.Derived.Extra(h.Calls)))
	t.row("calls without a 200", h.Plain.Failed, h.Fixed.Failed, h.Derived.Failed)
	t.note("retryfuse: Hedge.Max 1, Hedge.Delay %s; then Hedge.Quantile %.2f: once the scope has 20 answers, the delay is their p95 (at most 20ms)", dur(tailHedgeDelay), tailQuantile)
	t.note("each hedge takes a retry from the budget; the slower copy is cancelled and its connection closed")

	o := r.Overload
	t.section(fmt.Sprintf("6. Overload: %d workers × %s (%.0f/s), unbounded queue; offered 2× for %s, then 0.5× for %s",
		overloadWorkers, dur(overloadService), overloadCapacity, dur(overloadFor), dur(overloadAfter)),
		"plain loop", fmt.Sprintf("retryfuse Load.MaxInFlight %d", overloadGuess), "retryfuse Load.Adaptive")
	t.row("goodput during the overload (calls/s)", fmt.Sprintf("%.0f", o.Plain.Goodput), fmt.Sprintf("%.0f", o.Static.Goodput), fmt.Sprintf("%.0f", o.Adaptive.Goodput))
	t.row("p99 of the calls that succeeded", dur(o.Plain.P99), dur(o.Static.P99), dur(o.Adaptive.P99))
	t.row("requests received during the overload", o.Plain.Received, o.Static.Received, o.Adaptive.Received)
	t.row("work done for callers who had gone", pct0(o.Plain.WastedShare()), pct0(o.Static.WastedShare()), pct0(o.Adaptive.WastedShare()))
	t.row("calls refused locally, during / after", refusedPair(o.Plain), refusedPair(o.Static), refusedPair(o.Adaptive))
	t.row("calls succeed again after the overload", back(o.Plain.Recovered), back(o.Static.Recovered), back(o.Adaptive.Recovered))
	t.note("each side: %d attempts of at most %s within a %s deadline; retryfuse's learnt limit needs no number:", demoAttempts, dur(overloadAttempt), dur(overloadDeadline))
	t.note("it keeps the workers busy without a queue in front of them, and refuses the rest at once (ErrDeclined)")

	e := r.Exactly
	t.section("7. Exactly once: the payment of section 2, with the Idempotency-Key middleware in front of the server")
	t.row("times applied, behind the middleware", e.PlainApplied, e.FuseApplied)
	t.row("what the caller got", e.PlainOutcome, e.FuseOutcome)
	t.row("time until the caller had an answer", dur(e.PlainElapsed), dur(e.FuseElapsed))
	replay := "not replayed"
	if e.FuseReplayed {
		replay = "the stored response, replayed"
	}
	t.note("the middleware (package idempotency) runs a key's request once and answers a repeat with the stored response")
	t.note("retryfuse (Keys.ServerHonours, confirmed by the marker on its first keyed call) repeated the uncertain write with the same key and body: %d attempts, its answer %s", e.FuseAttempts, replay)

	c := r.Crash
	t.section("8. A crash mid-request: the handler writes the charge, then its server dies before the response is recorded",
		"key in its own ledger", "key in the charge's transaction")
	t.row("times the handler ran", c.Own.Runs, c.Tx.Runs)
	t.row("charges in the database", c.Own.Applied, c.Tx.Applied)
	t.row("what retryfuse's caller got", c.Own.Outcome, c.Tx.Outcome)
	t.row("a later call under the key", stuck(c.Own.KeyStuck), stuck(c.Tx.KeyStuck))
	t.note("both behind the middleware, retryfuse repeating the uncertain write (%d and %d attempts); on the right, its transactional mode on SQLite", c.Own.Attempts, c.Tx.Attempts)
	t.note("(retryfusesql): the claim, the charge and the response commit together, so the crash left nothing and the repeat ran once")
	return t.err
}

// stuck says what a later call under a key got.
func stuck(reconcile bool) string {
	if reconcile {
		return "*ReconcileRequiredError"
	}
	return "the stored response"
}

// pct0 prints a share as a whole percentage.
func pct0(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) }

func refusedPair(s overloadSide) string {
	return fmt.Sprintf("%.0f%% / %.1f%%", 100*s.Refused, 100*s.After)
}

// back prints how long after the overload calls succeeded again.
func back(d time.Duration) string {
	switch {
	case d < 0:
		return "not within " + dur(overloadAfter)
	case d == 0:
		return "at once"
	}
	return "after " + dur(d)
}

func pct(f float64) string { return fmt.Sprintf("%+.1f%%", 100*f) }

// why explains a breaker transition.
func why(tr brakeTransition) string {
	switch {
	case tr.From == breaker.Closed && tr.To == breaker.Open:
		return "failure threshold reached: calls now fail fast"
	case tr.To == breaker.HalfOpen:
		return "open interval over: one probe may pass"
	case tr.From == breaker.HalfOpen && tr.To == breaker.Open:
		return "the probe failed: open again"
	case tr.To == breaker.Closed:
		return "the probe succeeded: closed"
	}
	return ""
}

// table prints fixed-width rows and remembers the first write error.
type table struct {
	w   io.Writer
	err error
}

const labelWidth, cellWidth = 40, 28

func (t *table) line(format string, args ...any) {
	if t.err == nil {
		_, t.err = fmt.Fprintf(t.w, format+"\n", args...)
	}
}

// section starts a block under title, with column headers cols (by
// default the two sides).
func (t *table) section(title string, cols ...string) {
	if len(cols) == 0 {
		cols = []string{"plain loop", "retryfuse"}
	}
	t.line("")
	t.line("%s", title)
	t.header(cols...)
}

func (t *table) header(cols ...string) { t.row("", toAny(cols)...) }

func (t *table) row(label string, cells ...any) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "   %-*s", labelWidth, label)
	for i, c := range cells {
		if i == len(cells)-1 {
			fmt.Fprint(&sb, c)
		} else {
			fmt.Fprintf(&sb, "%-*v", cellWidth, c)
		}
	}
	t.line("%s", strings.TrimRight(sb.String(), " "))
}

func (t *table) note(format string, args ...any) { t.line("   "+format, args...) }

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// dur prints a duration briefly: seconds to two decimals from 1s, whole
// milliseconds from 10ms, tenths of a millisecond from 1ms, whole
// microseconds below (a loopback answer takes tens of them), and
// nanoseconds below a microsecond.
func dur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	case d >= time.Microsecond:
		return d.Round(time.Microsecond).String()
	}
	return d.String()
}

// at prints a time from the start, or "never".
func at(d time.Duration) string {
	if d == 0 {
		return "never"
	}
	return "+" + dur(d)
}
