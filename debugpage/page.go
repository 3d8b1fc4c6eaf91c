// Package debugpage is a live page of retryfuse Transports, in the manner
// of net/http/pprof and expvar: an http.Handler a service mounts (under
// /debug/retryfuse, say) that shows each scope of one or more Transports
// as it stands — the breaker's state, its settings version and the time
// in that state; the retry budget's balance; the attempts in flight
// against the bulkhead or the learnt limit; the throttle's refused share
// and the pace learnt from 429s — and the last give-ups and reconcile
// errors with their reasons.
//
// The page is HTML a person reads at a glance, refreshing itself every
// two seconds (?refresh=N sets N seconds, 0 stops it), the troubled scopes
// first (an open or half-open breaker, a throttle refusing, attempts
// queued), at most 500 a Transport; the same state is JSON for tools
// (?format=json, or an Accept header that asks for application/json, not
// text/html), every scope. ?scope=TEXT keeps the scopes whose name holds
// TEXT.
//
//	page := debugpage.New()
//	tr := &retryfuse.Transport{Brake: retryfuse.BrakePolicy{Breaker: b}}
//	tr.Hooks = retryfuse.JoinHooks(tr.Hooks, page.Watch("payments", tr))
//	mux.Handle("/debug/retryfuse", page)
//
// The scopes are read when the page is asked for (Transport.Snapshot),
// under each control's own lock: nothing is added to a call's path. The
// events come through the Hooks that Watch returns, which record a call
// that gives up or leaves a write uncertain — never a call that succeeds —
// in a ring of the latest 100; a Transport whose Hooks do not
// include them shows its scopes without events. URLs are shown as the
// hooks show them, without user information and with the values of
// credentials' query parameters hidden (Transport.RedactQueryParams), and
// so are the URLs within an error's text.
//
// Like net/http/pprof, the page tells what a service calls and how it
// fares: mount it where only operators reach it.
package debugpage

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/internal/redact"
)

// The page's bounds.
const (
	// maxEvents is how many give-ups and reconcile errors the page keeps,
	// the latest, across every Transport it watches.
	maxEvents = 100
	// maxRows is how many scopes of one Transport the HTML shows, the
	// troubled first; the JSON has every scope.
	maxRows = 500
	// maxErrText bounds an event's error text, in bytes.
	maxErrText = 512
)

// Page is the live page of the Transports it watches: an http.Handler.
// Make it with New. This type is concurrency safe.
type Page struct {
	now  func() time.Time // the wall clock; a test's in the tests
	turn chan struct{}    // held while a page is read and made: one at a time

	mu      sync.Mutex // guards watched and the ring
	watched []*watched
	ring    [maxEvents]event
	next    int // the ring's next slot
	count   int // events in the ring, at most maxEvents
}

// watched is one Transport the page watches, under its name.
type watched struct {
	name       string
	t          *retryfuse.Transport // nil: events only
	params     []string             // the query parameters to redact
	giveUps    atomic.Uint64
	reconciles atomic.Uint64
}

// New returns a page that watches no Transport yet.
func New() *Page { return &Page{now: time.Now, turn: make(chan struct{}, 1)} }

// Watch shows t's scopes on the page under name, and returns the Hooks
// that record its give-ups and reconcile errors: join them to t's own
// before t's first call (retryfuse.JoinHooks), for Hooks are read on
// every call and must not change while calls run. Several Transports may
// be watched, and one under several names; a nil t records events only.
// Watch reads t.RedactQueryParams.
func (p *Page) Watch(name string, t *retryfuse.Transport) retryfuse.Hooks {
	w := &watched{name: name, t: t, params: redact.DefaultQueryParams()}
	if t != nil && t.RedactQueryParams != nil {
		w.params = t.RedactQueryParams
	}
	p.mu.Lock()
	p.watched = append(p.watched, w)
	p.mu.Unlock()
	return retryfuse.Hooks{
		GiveUp: func(info retryfuse.GiveUpInfo) {
			w.giveUps.Add(1)
			e := w.eventOf(p.now(), kindGiveUp, info.CallInfo, info.Err)
			e.Reason, e.Status = retryfuse.ReasonName(info.Reason), info.StatusCode
			if e.Error == "" && info.Reason != nil {
				e.Error = w.text(info.Reason)
			}
			p.record(e)
		},
		Reconcile: func(info retryfuse.ReconcileInfo) {
			w.reconciles.Add(1)
			var err error
			if info.Err != nil { // a nil *ReconcileRequiredError is no error
				err = info.Err
			}
			e := w.eventOf(p.now(), kindReconcile, info.CallInfo, err)
			e.Reason, e.Resolution = "reconcile_required", info.Resolution
			p.record(e)
		},
	}
}

// The kinds of event.
const (
	kindGiveUp    = "give_up"   // Hooks.GiveUp: the call stopped with a failure
	kindReconcile = "reconcile" // Hooks.Reconcile: a write's outcome is uncertain
)

// event is a give-up or a reconcile error as the page keeps it.
type event struct {
	At        time.Time `json:"at"`
	Transport string    `json:"transport"` // the name it is watched under
	Kind      string    `json:"kind"`      // kindGiveUp or kindReconcile
	// Reason is the reason's stable name (retryfuse.ReasonName).
	Reason string `json:"reason"`
	CallID uint64 `json:"callId"`
	// Attempts is the number of the call's last attempt, 0 when none was
	// sent.
	Attempts       int    `json:"attempts"`
	Method         string `json:"method"`
	URL            string `json:"url"` // redacted, as the hooks show it
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	Status         int    `json:"status,omitempty"` // the response handed back, if any
	// Error is the last error's text, its URLs and what may be a
	// credential in it redacted (redactURLs), at most 512 bytes.
	Error string `json:"error,omitempty"`
	// Resolution is the Reconciler's answer (kindReconcile).
	Resolution string `json:"resolution,omitempty"`
}

// eventOf returns the event of a call under w's name.
func (w *watched) eventOf(at time.Time, kind string, ci retryfuse.CallInfo, err error) event {
	e := event{At: at, Transport: w.name, Kind: kind, CallID: ci.CallID, Attempts: ci.Attempt,
		Method: ci.Method, URL: ci.URL, IdempotencyKey: ci.IdempotencyKey}
	if err != nil {
		e.Error = w.text(err)
	}
	return e
}

// text is err's text, bounded, its URLs redacted.
func (w *watched) text(err error) (s string) {
	defer func() {
		if recover() != nil { // an error whose Error panics
			s = "(the error's text panicked)"
		}
	}()
	s = err.Error()
	if len(s) > 4*maxErrText {
		s = s[:4*maxErrText] // bounded before the URLs are looked for
	}
	return truncate(redactURLs(s, w.params), maxErrText)
}

// record keeps e in the ring, over the oldest when it is full.
func (p *Page) record(e event) {
	p.mu.Lock()
	p.ring[p.next] = e
	p.next = (p.next + 1) % maxEvents
	p.count = min(p.count+1, maxEvents)
	p.mu.Unlock()
}

// events returns the events the page keeps, the newest first.
func (p *Page) events() []event {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]event, 0, p.count)
	for i := 1; i <= p.count; i++ {
		out = append(out, p.ring[(p.next-i+maxEvents)%maxEvents])
	}
	return out
}

// watching returns the Transports watched, in the order of Watch.
func (p *Page) watching() []*watched {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*watched(nil), p.watched...)
}
