package debugpage

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/breaker"
)

// This file is what the page shows, read when it is asked for: each
// watched Transport's scopes (Transport.Snapshot) and the events, in the
// form both the JSON and the HTML are made from; and the handler that
// answers with one or the other.

// state is the page's content at one time: the JSON's form.
type state struct {
	At         time.Time        `json:"at"`
	Transports []transportState `json:"transports"`
	Events     []event          `json:"events"` // the newest first
}

// transportState is one watched Transport.
type transportState struct {
	Name string `json:"name"`
	// GiveUps and Reconciles count the events heard since Watch, those
	// no longer kept included.
	GiveUps    uint64       `json:"giveUps"`
	Reconciles uint64       `json:"reconciles"`
	Scopes     []scopeState `json:"scopes"`
}

// scopeState is one scope; a control that is off is null.
type scopeState struct {
	Scope     string          `json:"scope"`
	Breaker   []breakerState  `json:"breaker"` // null: no Breaker; []: it does not remember the scope
	Budget    *budgetState    `json:"budget"`
	Bulkhead  *bulkheadState  `json:"bulkhead"`
	RateLimit *rateLimitState `json:"rateLimit"`
	Throttle  *throttleState  `json:"throttle"`
	Pace      *paceState      `json:"pace"`
}

type breakerState struct {
	Scope string    `json:"scope"` // the scope, or with Brake.Route one of its divisions
	State string    `json:"state"` // closed, open, half_open
	Since time.Time `json:"since"`
	// InState is the time since Since, in seconds.
	InState float64 `json:"inStateSeconds"`
	Version uint64  `json:"settingsVersion"`
	// ProbeDue is, for an open scope, when its first probe may go.
	ProbeDue  *time.Time `json:"probeDue,omitempty"`
	Failures  int        `json:"failures"`
	Successes int        `json:"successes"`
	Probes    int        `json:"probes"`
	InFlight  int        `json:"inFlight"`
	Cause     string     `json:"cause,omitempty"` // what opened an open scope
}

type budgetState struct {
	Available float64 `json:"available"`
	Requests  uint64  `json:"requests"`
	Retries   uint64  `json:"retries"`
	Refused   uint64  `json:"refused"`
}

type bulkheadState struct {
	InFlight  int  `json:"inFlight"`
	Queued    int  `json:"queued"`
	Limit     int  `json:"limit"`   // 0: none
	Allowed   int  `json:"allowed"` // admitted at once now; 0: no bound
	SlowStart bool `json:"slowStart"`
	Learnt    bool `json:"learnt"`
	Floor     int  `json:"floor,omitempty"`
	Ceiling   int  `json:"ceiling,omitempty"`
}

type rateLimitState struct {
	Limit  float64 `json:"limit"`
	Burst  int     `json:"burst"`
	Tokens float64 `json:"tokens"`
}

type throttleState struct {
	Refusing float64 `json:"refusing"`
	Requests uint64  `json:"requests"`
	Accepted uint64  `json:"accepted"`
	Rejected uint64  `json:"rejected"`
}

type paceState struct {
	Rate      float64    `json:"rate"` // calls per second; 0: idle
	HeldUntil *time.Time `json:"heldUntil,omitempty"`
}

// read gathers the page's content at now, the scopes whose name holds
// filter alone.
func (p *Page) read(now time.Time, filter string) state {
	ws := p.watching()
	s := state{At: now, Transports: make([]transportState, len(ws)), Events: p.events()}
	for i, w := range ws {
		ts := &s.Transports[i]
		ts.Name, ts.GiveUps, ts.Reconciles = w.name, w.giveUps.Load(), w.reconciles.Load()
		if w.t == nil {
			continue
		}
		snap := w.t.Snapshot()
		ts.Scopes = make([]scopeState, 0, len(snap))
		for j := range snap {
			if filter == "" || strings.Contains(snap[j].Scope, filter) {
				ts.Scopes = append(ts.Scopes, w.scopeOf(&snap[j], now))
			}
		}
	}
	return s
}

// scopeOf is the page's form of one scope's state at now.
func (w *watched) scopeOf(ss *retryfuse.ScopeState, now time.Time) scopeState {
	s := scopeState{Scope: ss.Scope}
	if ss.Breaker != nil {
		s.Breaker = make([]breakerState, 0, len(ss.Breaker))
	}
	for _, c := range ss.Breaker {
		b := breakerState{Scope: c.Scope, State: c.To.String(), Since: c.At, InState: max(0, now.Sub(c.At).Seconds()),
			Version: c.Settings.Version, Failures: c.Failures, Successes: c.Successes, Probes: c.Probes, InFlight: c.InFlight}
		if c.To == breaker.Open {
			due := c.At.Add(c.Settings.OpenTimeout)
			b.ProbeDue = &due
			if c.Cause != nil {
				b.Cause = w.text(c.Cause)
			}
		}
		s.Breaker = append(s.Breaker, b)
	}
	if b := ss.Budget; b != nil {
		s.Budget = &budgetState{Available: b.Available, Requests: b.Requests, Retries: b.Retries, Refused: b.Refused}
	}
	if b := ss.Bulkhead; b != nil {
		s.Bulkhead = &bulkheadState{InFlight: b.InFlight, Queued: b.Queued, Limit: b.Limit, Allowed: b.Allowed,
			SlowStart: b.SlowStart, Learnt: b.Learnt, Floor: b.Floor, Ceiling: b.Ceiling}
	}
	if r := ss.RateLimit; r != nil {
		s.RateLimit = &rateLimitState{Limit: r.Limit, Burst: r.Burst, Tokens: r.Tokens}
	}
	if th := ss.Throttle; th != nil {
		s.Throttle = &throttleState{Refusing: th.Refusing, Requests: th.Requests, Accepted: th.Accepted, Rejected: th.Rejected}
	}
	if pc := ss.Pace; pc != nil {
		s.Pace = &paceState{Rate: pc.Rate}
		if !pc.HeldUntil.IsZero() {
			held := pc.HeldUntil
			s.Pace.HeldUntil = &held
		}
	}
	return s
}

// ServeHTTP answers a GET or HEAD with the page: HTML, or JSON when the
// query says format=json or the Accept header asks for application/json
// and not text/html. See the package's documentation for the query.
func (p *Page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	q := r.URL.Query()
	refresh := 2
	if v := q.Get("refresh"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 3600 {
			http.Error(w, "refresh: want a whole number of seconds from 0 to 3600", http.StatusBadRequest)
			return
		}
		refresh = n
	}
	format := q.Get("format")
	if format != "" && format != "json" && format != "html" {
		http.Error(w, "format: want json or html", http.StatusBadRequest)
		return
	}
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	asJSON := wantsJSON(format, r.Header.Get("Accept"))
	if asJSON {
		h.Set("Content-Type", "application/json")
	} else {
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	}
	if r.Method == http.MethodHead {
		return
	}
	// One page is read and made at a time, into memory, and written out
	// after: open tabs refreshing together cost one page's work at once,
	// and a slow reader holds nobody up.
	select {
	case p.turn <- struct{}{}:
	case <-r.Context().Done():
		return
	}
	buf, err := p.make(r.URL, asJSON, refresh)
	if err != nil {
		// A value of a user's own (a Budget's Snapshot) that the page
		// cannot write: said, rather than an empty page.
		h.Del("Content-Security-Policy")
		http.Error(w, "retryfuse debug page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = buf.WriteTo(w) // an error is the client's: it went away
}

// make reads and makes the page asked for at u, in p's turn, which it
// gives back however it returns: a panic while reading (in a user's
// Budget, say) goes up to the server, and leaves the page answering.
func (p *Page) make(u *url.URL, asJSON bool, refresh int) (*bytes.Buffer, error) {
	defer func() { <-p.turn }()
	var buf bytes.Buffer
	s := p.read(p.now(), u.Query().Get("scope"))
	if asJSON {
		// The page's own types; but a float of a user's Budget may be
		// one JSON cannot hold (NaN).
		if err := json.NewEncoder(&buf).Encode(s); err != nil {
			return nil, err
		}
		return &buf, nil
	}
	if err := pageTemplate.Execute(&buf, htmlOf(s, refresh, u)); err != nil {
		return nil, err
	}
	return &buf, nil
}

// wantsJSON reports whether the page is asked for as JSON: by the query's
// format, else by an Accept header that names application/json and not
// text/html (a browser's names both, or neither with */*).
func wantsJSON(format, accept string) bool {
	switch format {
	case "json":
		return true
	case "html":
		return false
	}
	return strings.Contains(accept, "application/json") && !strings.Contains(accept, "text/html")
}
