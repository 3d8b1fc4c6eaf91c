package debugpage

import (
	"cmp"
	"fmt"
	"html/template"
	"net/url"
	"slices"
	"strconv"
	"time"
)

// This file is the page as a person reads it: one table a Transport, a
// row a scope (the troubled first, at most maxRows), a cell a control,
// coloured by how it fares, "off" for a control that is not configured;
// and the last events. Every cell's text is made here, so that the
// template only places it.

// htmlPage is what the template shows.
type htmlPage struct {
	At         string
	Refresh    int
	JSON       string // the same page as JSON: a link relative to the page, wherever it is mounted
	Filter     string
	Transports []htmlTransport
	Events     []htmlEvent
}

type htmlTransport struct {
	Name                  string
	Scopes, Hidden        int
	Open, HalfOpen        int
	Refusing, Queued      int
	GiveUps, Reconciles   uint64
	Rows                  []htmlRow
	EventsOnly, HasFilter bool
}

type htmlRow struct {
	Scope   string
	Breaker string // the worst state of its breaker scopes, or "off"
	Class   string
	Cells   [6]cell
}

type htmlEvent struct {
	At, Transport, Kind, Reason, Call, Status, Attempts, Error, Class string
}

// cell is one control of a scope: its text, its class (ok, warn, bad,
// off) and its details on hover.
type cell struct{ Text, Class, Title string }

var off = cell{Text: "off", Class: "off", Title: "not configured"}

// htmlOf is the page of s, refreshing every refresh seconds, asked for
// at u.
func htmlOf(s state, refresh int, u *url.URL) htmlPage {
	q := u.Query()
	q.Set("format", "json")
	h := htmlPage{At: s.At.UTC().Format("2006-01-02 15:04:05 MST"), Refresh: refresh,
		JSON: "?" + q.Encode(), Filter: u.Query().Get("scope")}
	for _, ts := range s.Transports {
		ht := htmlTransport{Name: ts.Name, Scopes: len(ts.Scopes), GiveUps: ts.GiveUps, Reconciles: ts.Reconciles,
			HasFilter: h.Filter != "", EventsOnly: ts.Scopes == nil}
		ranks := make([]int, len(ts.Scopes))
		for i := range ts.Scopes {
			sc := &ts.Scopes[i]
			ranks[i] = rankOf(sc)
			switch worstBreaker(sc).State {
			case "open":
				ht.Open++
			case "half_open":
				ht.HalfOpen++
			}
			if sc.Throttle != nil && sc.Throttle.Refusing > 0 {
				ht.Refusing++
			}
			if sc.Bulkhead != nil && sc.Bulkhead.Queued > 0 {
				ht.Queued++
			}
		}
		order := make([]int, len(ranks))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(ranks[b], ranks[a]) }) // the troubled first, then by name
		for _, i := range order[:min(len(order), maxRows)] {
			ht.Rows = append(ht.Rows, rowOf(&ts.Scopes[i], ranks[i], s.At)) // the text of the rows shown alone
		}
		ht.Hidden = len(ranks) - len(ht.Rows)
		h.Transports = append(h.Transports, ht)
	}
	for _, e := range s.Events {
		he := htmlEvent{At: e.At.UTC().Format("15:04:05.000"), Transport: e.Transport, Kind: e.Kind, Reason: e.Reason,
			Call: e.Method + " " + e.URL, Attempts: strconv.Itoa(e.Attempts), Error: e.Error, Class: "warn"}
		if e.Status != 0 {
			he.Status = strconv.Itoa(e.Status)
		}
		if e.Kind == kindReconcile {
			he.Class = "bad"
			he.Reason += " (" + e.Resolution + ")"
		}
		h.Events = append(h.Events, he)
	}
	return h
}

// worstBreaker is the most troubled of s's breaker scopes; the zero
// breakerState (State empty) when it has none.
func worstBreaker(s *scopeState) breakerState {
	var worst breakerState
	for i, b := range s.Breaker {
		if i == 0 || stateRank(b.State) > stateRank(worst.State) {
			worst = b
		}
	}
	return worst
}

// rankOf is how troubled scope s is: 3 with an open breaker, 2 half-open,
// 1 with its throttle refusing, its calls paced or attempts queued, else 0.
func rankOf(s *scopeState) int {
	rank := stateRank(worstBreaker(s).State)
	if th := s.Throttle; th != nil && th.Refusing > 0 || s.Pace != nil && s.Pace.Rate > 0 || s.Bulkhead != nil && s.Bulkhead.Queued > 0 {
		rank = max(rank, 1)
	}
	return rank
}

// rowOf is the row of scope s, of rank (rankOf), at now.
func rowOf(s *scopeState, rank int, now time.Time) htmlRow {
	r := htmlRow{Scope: s.Scope, Breaker: "off", Class: []string{"ok", "warn", "warn", "bad"}[rank],
		Cells: [6]cell{off, off, off, off, off, off}}
	switch {
	case s.Breaker != nil && len(s.Breaker) == 0:
		r.Breaker = "unknown"
		r.Cells[0] = cell{Text: "not remembered", Class: "off", Title: "the Breaker has not heard of this scope yet, or forgot it past its MaxScopes"}
	case len(s.Breaker) > 0:
		worst := worstBreaker(s)
		r.Breaker = worst.State
		c := cell{Text: fmt.Sprintf("%s %s · v%d", worst.State, short(now.Sub(worst.Since)), worst.Version), Class: "ok"}
		if len(s.Breaker) > 1 {
			c.Text += fmt.Sprintf(" · %d routes", len(s.Breaker))
		}
		c.Title = fmt.Sprintf("since %s; failures %d, in flight %d", worst.Since.UTC().Format(time.TimeOnly), worst.Failures, worst.InFlight)
		switch worst.State {
		case "open":
			c.Class = "bad"
			c.Title += "; probe due " + worst.ProbeDue.UTC().Format(time.TimeOnly) + "; cause: " + worst.Cause
		case "half_open":
			c.Class = "warn"
			c.Title += fmt.Sprintf("; probes out %d, passed %d", worst.Probes, worst.Successes)
		}
		r.Cells[0] = c
	}
	if b := s.Budget; b != nil {
		c := cell{Text: strconv.FormatFloat(b.Available, 'f', 1, 64) + " left", Class: "ok",
			Title: fmt.Sprintf("requests %d, retries %d, refused %d", b.Requests, b.Retries, b.Refused)}
		if b.Available < 1 {
			c.Class = "warn"
		}
		r.Cells[1] = c
	}
	if b := s.Bulkhead; b != nil {
		c := cell{Text: strconv.Itoa(b.InFlight), Class: "ok", Title: "attempts in flight"}
		switch {
		case b.Allowed > 0 && b.Limit > 0:
			c.Text += " / " + strconv.Itoa(b.Allowed)
		case b.Allowed > 0:
			c.Text += " / " + strconv.Itoa(b.Allowed) + " (slow start)"
		default:
			c.Text += " (no limit)"
		}
		if b.SlowStart && b.Limit > 0 {
			c.Text += " slow start of " + strconv.Itoa(b.Limit)
		}
		if b.Learnt {
			c.Text += " learnt"
			c.Title += fmt.Sprintf("; the limit learnt between %d and %d", b.Floor, b.Ceiling)
		}
		if b.Queued > 0 {
			c.Text += fmt.Sprintf(", %d queued", b.Queued)
			c.Class = "warn"
		}
		r.Cells[2] = c
	}
	if l := s.RateLimit; l != nil {
		c := cell{Text: fmt.Sprintf("%s/s, %.1f tokens", strconv.FormatFloat(l.Limit, 'g', 4, 64), l.Tokens), Class: "ok",
			Title: fmt.Sprintf("burst %d", l.Burst)}
		if l.Tokens < 1 {
			c.Class = "warn"
		}
		r.Cells[3] = c
	}
	if th := s.Throttle; th != nil {
		c := cell{Text: fmt.Sprintf("refusing %.0f%%", 100*th.Refusing), Class: "ok",
			Title: fmt.Sprintf("window: %d requests, %d accepted, %d rejected", th.Requests, th.Accepted, th.Rejected)}
		if th.Refusing > 0 {
			c.Class = "bad"
		}
		r.Cells[4] = c
	}
	if pc := s.Pace; pc != nil {
		p := cell{Text: "idle", Class: "ok", Title: "no 429 lately"}
		if pc.Rate > 0 {
			p = cell{Text: strconv.FormatFloat(pc.Rate, 'f', 1, 64) + "/s", Class: "warn", Title: "new calls paced after 429s"}
		}
		if pc.HeldUntil != nil {
			p.Text += " held " + short(pc.HeldUntil.Sub(now))
			p.Title += "; a Retry-After holds new calls until " + pc.HeldUntil.UTC().Format(time.TimeOnly)
		}
		r.Cells[5] = p
	}
	return r
}

// stateRank orders a breaker's states by trouble.
func stateRank(s string) int {
	switch s {
	case "open":
		return 3
	case "half_open":
		return 2
	}
	return 0
}

// short writes d to the second, or to the millisecond below one.
func short(d time.Duration) string {
	if d < time.Second {
		return max(0, d).Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

var pageTemplate = template.Must(template.New("page").Parse(pageHTML))
