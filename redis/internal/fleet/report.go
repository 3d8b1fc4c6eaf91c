package fleet

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// This file is a phase's figures, and their report.

// Outcomes counts the calls of each kind by how they ended.
func (r *PhaseResult) Outcomes() [numKinds][numOutcomes]int {
	var n [numKinds][numOutcomes]int
	for _, c := range r.Load.Calls {
		n[c.Kind][c.Outcome]++
	}
	return n
}

// AppliedTwice counts the keyed writes (by key) and the unkeyed ones (by
// id) the servers applied more than once, after the redelivery.
func (r *PhaseResult) AppliedTwice() (keyed, unkeyed int) {
	for _, c := range r.Load.Calls {
		if r.Applied[c.ID] > 1 {
			switch c.Kind {
			case KindKeyed:
				keyed++
			case KindUnkeyed:
				unkeyed++
			}
		}
	}
	return keyed, unkeyed
}

// KeyedReconcile counts the keyed writes (first sends, not the callers'
// re-sends) that ended in a *ReconcileRequiredError, and of them those
// that started after a caller had first seen the servers' marker, by
// which time the Transport had learnt that they honour keys.
func (r *PhaseResult) KeyedReconcile() (all, afterMarker int) {
	for _, c := range r.Load.Calls {
		if c.Kind == KindKeyed && c.Outcome == OutReconcile {
			all++
			if !r.Load.FirstMarker.IsZero() && c.Start.After(r.Load.FirstMarker) {
				afterMarker++
			}
		}
	}
	return all, afterMarker
}

// appliedOf counts the calls of kind that ended in o by how often the
// servers had applied their write when the load ended: never, once, more.
func (r *PhaseResult) appliedOf(kind Kind, o Outcome) (never, once, more int) {
	for _, c := range r.Load.Calls {
		if c.Kind != kind || c.Outcome != o {
			continue
		}
		switch n := r.AppliedBefore[c.ID]; {
		case n == 0:
			never++
		case n == 1:
			once++
		default:
			more++
		}
	}
	return never, once, more
}

// causes counts the causes of the reconcile errors of kind.
func (r *PhaseResult) causes(kind Kind) string {
	n := map[string]int{}
	for _, c := range r.Load.Calls {
		if c.Kind == kind && c.Outcome == OutReconcile {
			n[c.Detail]++
		}
	}
	var s []string
	for cause, k := range n {
		s = append(s, fmt.Sprintf("%s: %d", cause, k))
	}
	slices.Sort(s)
	return strings.Join(s, ", ")
}

// Unexpected lists the details of the calls that ended in another status
// or another error, and of the keyed writes that ended in a reconcile
// error, at most 10, with how each attempt ended.
func (r *PhaseResult) Unexpected() []string {
	var s []string
	for _, c := range r.Load.Calls {
		if (c.Outcome == OutOtherStatus || c.Outcome == OutOtherError || (c.Kind == KindKeyed && c.Outcome == OutReconcile)) && len(s) < 10 {
			s = append(s, fmt.Sprintf("%s %s, %s: %s; attempts: %s", c.Kind, c.ID, c.Outcome, c.Detail, strings.Join(c.Trail, ", ")))
		}
	}
	return s
}

// Report writes the phase's figures to w, as Markdown.
func (r *PhaseResult) Report(w io.Writer) {
	o, l := r.Options, r.Load
	client := "HonourMemory default (learnt from the marker)"
	switch {
	case o.Load.Client.Declared:
		client = "ServerHonoursKeys true"
	case o.Load.Client.Unaware:
		client = "HonourMemory -1 (never learnt: no uncertain write repeated)"
	}
	fmt.Fprintf(w, "#### %s\n\n", o.Name)
	throttle := "off"
	if o.Load.Client.Throttle {
		throttle = "on (the default)"
	}
	fmt.Fprintf(w, "%d calls from %d callers in %.1fs (%.0f calls/s); client: %s, MaxAttempts %d, AttemptTimeout %v, budget ratio %s, throttle %s.\n",
		len(l.Calls), o.Load.Callers, l.Took.Seconds(), float64(len(l.Calls))/l.Took.Seconds(), client,
		o.Load.Client.MaxAttempts, o.Load.Client.AttemptTimeout, budgetName(o.Load.Client.BudgetRatio), throttle)
	fmt.Fprintf(w, "Attempts %d, retries %d, attempts answered by a replay %d, requests net/http re-sent by itself %d.\n",
		l.Attempts, l.Retries, l.Replays, l.HiddenResends)
	var proxy []string
	for f := Fault503; f < numFaults; f++ {
		proxy = append(proxy, fmt.Sprintf("%s %d", f, r.Proxy[f]))
	}
	fmt.Fprintf(w, "Proxy: %d exchanges; faults: %s.\n", sum(r.Proxy[:]), strings.Join(proxy, ", "))
	if m := l.FirstMarker; !m.IsZero() {
		before := 0
		for _, c := range l.Calls {
			if c.Kind == KindKeyed && !c.Start.After(m) {
				before++
			}
		}
		fmt.Fprintf(w, "A caller first got the servers' marker (Idempotency-Key-Honoured) %.1f ms into the load; %d keyed writes had started by then.\n",
			float64(m.Sub(l.Start).Microseconds())/1000, before)
	}
	if len(r.Events) > 0 {
		var ev []string
		for _, e := range r.Events {
			ev = append(ev, fmt.Sprintf("%s at %.1fs", e.What, e.At.Seconds()))
		}
		fmt.Fprintf(w, "Redis: %s.\n", strings.Join(ev, "; "))
	}
	fmt.Fprintln(w)

	out := r.Outcomes()
	fmt.Fprintf(w, "| how the calls ended |")
	for k := range numKinds {
		fmt.Fprintf(w, " %s |", Kind(k))
	}
	fmt.Fprintf(w, "\n| --- |%s\n", strings.Repeat(" ---: |", int(numKinds)))
	for oc := range numOutcomes {
		row, any := "", false
		for k := range numKinds {
			row += fmt.Sprintf(" %d |", out[k][oc])
			any = any || out[k][oc] > 0
		}
		if any {
			fmt.Fprintf(w, "| %s |%s\n", Outcome(oc), row)
		}
	}
	fmt.Fprintln(w)

	keyed, unkeyed := r.AppliedTwice()
	all, after := r.KeyedReconcile()
	fmt.Fprintf(w, "- **applied twice** (the servers' record): keyed writes **%d**, unkeyed writes **%d**\n", keyed, unkeyed)
	fmt.Fprintf(w, "- keyed writes ended in `*ReconcileRequiredError`: **%d** (started after the marker was first seen: %d)", all, after)
	if all > 0 {
		never, once, _ := r.appliedOf(KindKeyed, OutReconcile)
		fmt.Fprintf(w, "; causes: %s; applied once %d, never %d", r.causes(KindKeyed), once, never)
	}
	fmt.Fprintln(w)
	if n := out[KindUnkeyed][OutReconcile]; n > 0 {
		never, once, _ := r.appliedOf(KindUnkeyed, OutReconcile)
		fmt.Fprintf(w, "- unkeyed writes ended in `*ReconcileRequiredError`: %d; causes: %s; applied once %d, never %d\n",
			n, r.causes(KindUnkeyed), once, never)
	}
	for _, oc := range []Outcome{OutUnavailable, OutInFlight, OutOutcomeUnknown, OutBodyCut} {
		if n := out[KindKeyed][oc]; n > 0 {
			never, once, _ := r.appliedOf(KindKeyed, oc)
			fmt.Fprintf(w, "- keyed writes ended in %s: %d; applied once %d, never %d\n", oc, n, once, never)
		}
	}
	var red []string
	for oc, n := range r.Redelivered {
		if n > 0 {
			red = append(red, fmt.Sprintf("%s %d", Outcome(oc), n))
		}
	}
	fmt.Fprintf(w, "- every keyed write sent once more after the load, straight to the servers (%d round(s)): %s\n",
		r.Rounds, strings.Join(red, ", "))
	for _, u := range r.Unexpected() {
		fmt.Fprintf(w, "- %s\n", u)
	}
	fmt.Fprintln(w)
}

func budgetName(ratio float64) string {
	if ratio == 0 {
		return "0.1 (the default)"
	}
	return fmt.Sprint(ratio)
}

func sum(v []int64) int64 {
	var s int64
	for _, x := range v {
		s += x
	}
	return s
}
