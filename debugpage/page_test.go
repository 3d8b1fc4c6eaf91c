package debugpage

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/breaker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is the page's clock in the tests.
var t0 = time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)

func newPage() *Page {
	p := New()
	p.now = func() time.Time { return t0 }
	return p
}

// backend is a loopback dependency answering status (settable).
func backend(t *testing.T, status int) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var code atomic.Int64
	code.Store(int64(status))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(int(code.Load()))
	}))
	t.Cleanup(srv.Close)
	return srv, &code
}

// watchedTransport is a Transport with a Breaker that opens at the second
// failure, watched by p as name.
func watchedTransport(t *testing.T, p *Page, name string) *retryfuse.Transport {
	t.Helper()
	b, err := breaker.New(breaker.Settings{FailureThreshold: 2, OpenTimeout: time.Minute, Version: 3})
	require.NoError(t, err)
	tr := &retryfuse.Transport{Brake: retryfuse.BrakePolicy{Breaker: b}, Retry: retryfuse.RetryPolicy{MaxAttempts: 1}}
	tr.Hooks = retryfuse.JoinHooks(tr.Hooks, p.Watch(name, tr))
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

func get(t *testing.T, c *http.Client, url string) {
	t.Helper()
	resp, err := c.Get(url)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// serve asks the page for target with the Accept header accept.
func serve(p *Page, target, accept string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, target, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, req)
	return rec
}

func readJSON(t *testing.T, p *Page, target string) state {
	t.Helper()
	rec := serve(p, target, "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	var s state
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &s))
	return s
}

func TestPageShowsEachScopeAndTheBreakerOpening(t *testing.T) {
	p := newPage()
	tr := watchedTransport(t, p, "payments")
	srv, code := backend(t, http.StatusOK)
	client := &http.Client{Transport: tr}
	get(t, client, srv.URL+"/ok")

	page := serve(p, "/debug/retryfuse", "text/html,application/xhtml+xml,application/json;q=0.9,*/*;q=0.8")
	require.Equal(t, http.StatusOK, page.Code)
	assert.Equal(t, "text/html; charset=utf-8", page.Header().Get("Content-Type"))
	body := page.Body.String()
	scope := srv.URL // the default scope: scheme, host and port
	assert.Contains(t, body, `data-scope="`+scope+`" data-breaker="closed"`)
	assert.Contains(t, body, `<meta http-equiv="refresh" content="2">`)

	code.Store(http.StatusServiceUnavailable)
	get(t, client, srv.URL+"/down")
	get(t, client, srv.URL+"/down")
	body = serve(p, "/debug/retryfuse?refresh=0", "").Body.String()
	assert.Contains(t, body, `data-scope="`+scope+`" data-breaker="open"`)
	assert.NotContains(t, body, `http-equiv="refresh"`, "refresh=0 stops it")

	s := readJSON(t, p, "/debug/retryfuse?format=json")
	require.Len(t, s.Transports, 1)
	ts := s.Transports[0]
	assert.Equal(t, "payments", ts.Name)
	require.Len(t, ts.Scopes, 1)
	sc := ts.Scopes[0]
	assert.Equal(t, scope, sc.Scope)
	require.Len(t, sc.Breaker, 1)
	assert.Equal(t, "open", sc.Breaker[0].State)
	assert.Equal(t, uint64(3), sc.Breaker[0].Version)
	require.NotNil(t, sc.Breaker[0].ProbeDue)
	assert.Equal(t, sc.Breaker[0].Since.Add(time.Minute), *sc.Breaker[0].ProbeDue)
	require.NotNil(t, sc.Budget, "the default budget")
	assert.Equal(t, uint64(3), sc.Budget.Requests)
	assert.Nil(t, sc.Bulkhead, "a Breaker brings no bulkhead and no slow start: off")
	assert.Nil(t, sc.Throttle, "the throttle is off unless asked for")
	assert.Nil(t, sc.Pace, "the pace is off unless asked for")
	assert.Nil(t, sc.RateLimit, "no RateLimit: off")
}

func TestPageIsJSONWhenAcceptAsksForIt(t *testing.T) {
	p := newPage()
	for _, c := range []struct {
		target, accept string
		json           bool
	}{
		{"/", "application/json", true},
		{"/", "text/html,application/json", false},
		{"/", "*/*", false},
		{"/", "", false},
		{"/?format=json", "text/html", true},
		{"/?format=html", "application/json", false},
	} {
		got := serve(p, c.target, c.accept).Header().Get("Content-Type") == "application/json"
		assert.Equal(t, c.json, got, "%s, Accept %q", c.target, c.accept)
	}
}

func TestPageRefusesBadInputWithAClearError(t *testing.T) {
	p := newPage()
	for _, target := range []string{"/?format=xml", "/?refresh=-1", "/?refresh=soon", "/?refresh=99999"} {
		rec := serve(p, target, "")
		assert.Equal(t, http.StatusBadRequest, rec.Code, target)
		assert.NotEmpty(t, rec.Body.String(), target)
	}
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
	assert.Equal(t, "GET, HEAD", rec.Header().Get("Allow"))
}

// The ring keeps the latest maxEvents, the newest first, however many
// calls give up.
func TestRingHoldsABoundedNumberOfEvents(t *testing.T) {
	p := newPage()
	h := p.Watch("events", nil)
	const calls = 3*maxEvents + 7
	for i := 1; i <= calls; i++ {
		h.GiveUp(retryfuse.GiveUpInfo{CallInfo: retryfuse.CallInfo{CallID: uint64(i)}, Reason: retryfuse.ErrAttemptsExhausted})
	}
	got := p.events()
	require.Len(t, got, maxEvents)
	for i, e := range got {
		if want := uint64(calls - i); e.CallID != want {
			t.Fatalf("event %d: call %d, want %d (the newest first)", i, e.CallID, want)
		}
	}
	s := readJSON(t, p, "/?format=json")
	assert.Len(t, s.Events, maxEvents)
	assert.Equal(t, uint64(calls), s.Transports[0].GiveUps, "the count keeps every event heard")
	assert.Nil(t, s.Transports[0].Scopes, "a nil Transport: events only")
}

// errBase fails every attempt with an error holding a URL with a
// credential in its query.
type errBase struct{}

func (errBase) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		r.Body.Close()
	}
	return nil, &urlErr{u: r.URL.String()}
}

type urlErr struct{ u string }

func (e *urlErr) Error() string { return `Post "` + e.u + `": unexpected EOF` }
func (e *urlErr) Unwrap() error { return io.ErrUnexpectedEOF }

func TestEventsOfRealCallsNameTheirReasonsAndHideCredentials(t *testing.T) {
	p := newPage()
	tr := &retryfuse.Transport{Base: errBase{}, Retry: retryfuse.RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Nanosecond, MaxBackoff: time.Nanosecond}}
	tr.Hooks = p.Watch("orders", tr)
	client := &http.Client{Transport: tr}

	_, err := client.Get("http://user:pw@orders.test/list?token=s3cret&page=2")
	require.Error(t, err)
	_, err = client.Post("http://orders.test/orders?api_key=k3y", "text/plain", strings.NewReader("order"))
	var rre *retryfuse.ReconcileRequiredError
	require.ErrorAs(t, err, &rre, "a POST whose outcome is uncertain")

	evs := p.events()
	require.Len(t, evs, 2)
	rec, give := evs[0], evs[1]
	assert.Equal(t, kindGiveUp, give.Kind)
	assert.Equal(t, "attempts_exhausted", give.Reason)
	assert.Equal(t, 2, give.Attempts)
	assert.Equal(t, t0, give.At)
	assert.Equal(t, kindReconcile, rec.Kind)
	assert.Equal(t, "reconcile_required", rec.Reason)
	assert.Equal(t, "still_unknown", rec.Resolution)
	assert.Equal(t, http.MethodPost, rec.Method)

	for _, rec := range []*httptest.ResponseRecorder{serve(p, "/", ""), serve(p, "/?format=json", "")} {
		body := rec.Body.String()
		for _, secret := range []string{"s3cret", "k3y", "pw@"} {
			assert.NotContains(t, body, secret, "%s shows a credential", rec.Header().Get("Content-Type"))
		}
		assert.Contains(t, body, "attempts_exhausted")
		assert.Contains(t, body, "reconcile_required")
	}
}

// An error whose Error panics is shown as such, and breaks nothing.
type panicErr struct{}

func (panicErr) Error() string { panic("no text") }

func TestAPanickingErrorTextBreaksNothing(t *testing.T) {
	p := newPage()
	h := p.Watch("x", nil)
	h.GiveUp(retryfuse.GiveUpInfo{Reason: errors.Join(context.Canceled), Err: panicErr{}})
	require.Len(t, p.events(), 1)
	assert.Equal(t, "(the error's text panicked)", p.events()[0].Error)
}

// The page reads every control while calls run, give up and open
// breakers (run with -race).
func TestPageReadsWhileCallsRun(t *testing.T) {
	p := newPage()
	tr := watchedTransport(t, p, "busy")
	tr.Load = retryfuse.LoadPolicy{MaxInFlight: 8, RateLimit: 1e6}
	tr.Scope.Of = func(r *http.Request) string { return r.URL.Path }
	srv, code := backend(t, http.StatusOK)
	client := &http.Client{Transport: tr}
	get(t, client, srv.URL+"/0") // a scope exists before the first page is read
	stop := make(chan struct{})
	var calls atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if g == 0 && i%10 == 0 {
					code.Store(int64([]int{http.StatusOK, http.StatusServiceUnavailable}[i/10%2]))
				}
				get(t, client, srv.URL+"/"+strconv.Itoa((g+i)%16))
				calls.Add(1)
			}
		})
	}
	pages := 0
	// Pages are read until enough calls ran beside them, not for a time.
	for deadline := time.Now().Add(5 * time.Second); (pages < 10 || calls.Load() < 40) && time.Now().Before(deadline); pages++ {
		for _, target := range []string{"/", "/?format=json"} {
			rec := serve(p, target, "")
			require.Equal(t, http.StatusOK, rec.Code)
		}
	}
	close(stop)
	wg.Wait()
	assert.Positive(t, pages)
	assert.Positive(t, calls.Load(), "no call ran beside the pages")
	s := readJSON(t, p, "/?format=json")
	assert.NotEmpty(t, s.Transports[0].Scopes)
}

// Beyond maxRows scopes, the HTML shows the troubled first (an open
// breaker before every closed one, whatever its name), says how many it
// leaves out, and ?scope= finds any; the JSON has them all.
func TestHTMLShowsTheTroubledScopesFirstWithinItsRows(t *testing.T) {
	p := newPage()
	b, err := breaker.New(breaker.Settings{FailureThreshold: 1, MaxScopes: 2 * maxRows})
	require.NoError(t, err)
	tr := &retryfuse.Transport{
		Base:  failing{path: "/zzz"},
		Brake: retryfuse.BrakePolicy{Breaker: b},
		Retry: retryfuse.RetryPolicy{MaxAttempts: 1},
		Scope: retryfuse.ScopePolicy{Max: 2 * maxRows, Of: func(r *http.Request) string { return "s" + r.URL.Path }},
	}
	tr.Hooks = p.Watch("many", tr)
	client := &http.Client{Transport: tr}
	for i := range maxRows + 10 {
		get(t, client, "http://many.test/"+strconv.Itoa(1000+i))
	}
	get(t, client, "http://many.test/zzz")

	body := serve(p, "/debug/retryfuse", "").Body.String()
	assert.Equal(t, maxRows, strings.Count(body, "<tr class=\"row-"), "rows shown")
	first := strings.Index(body, `data-scope="`)
	require.Positive(t, first)
	assert.True(t, strings.HasPrefix(body[first:], `data-scope="s/zzz" data-breaker="open"`), "the open scope first, though its name sorts last")
	assert.Contains(t, body, "11 more scopes, less troubled")
	assert.Contains(t, body, `href="?format=json"`, "the JSON link is relative to wherever the page is mounted")

	filtered := serve(p, "/debug/retryfuse?scope=1509", "").Body.String()
	assert.Equal(t, 1, strings.Count(filtered, "<tr class=\"row-"), "?scope= keeps the scopes whose name holds it")
	assert.Contains(t, filtered, `data-scope="s/1509"`)
	none := serve(p, "/debug/retryfuse?scope=nothing-holds-this", "").Body.String()
	assert.Contains(t, none, "No scope's name holds the text asked for.")

	s := readJSON(t, p, "/debug/retryfuse?format=json")
	assert.Len(t, s.Transports[0].Scopes, maxRows+11, "the JSON has every scope")
}

// failing answers 503 to path, 200 to any other.
type failing struct{ path string }

func (f failing) RoundTrip(r *http.Request) (*http.Response, error) {
	code := http.StatusOK
	if r.URL.Path == f.path {
		code = http.StatusServiceUnavailable
	}
	return &http.Response{StatusCode: code, Body: http.NoBody, Request: r, Header: http.Header{}}, nil
}

// A scope its Breaker does not remember reads so, not "off"; a long
// error's text is bounded.
func TestPageTellsAForgottenBreakerScopeAndBoundsErrorText(t *testing.T) {
	p := newPage()
	b, err := breaker.New(breaker.Settings{MaxScopes: 1})
	require.NoError(t, err)
	tr := &retryfuse.Transport{Base: failing{}, Brake: retryfuse.BrakePolicy{Breaker: b},
		Scope: retryfuse.ScopePolicy{Of: func(r *http.Request) string { return r.URL.Path }}}
	tr.Hooks = p.Watch("forgetful", tr)
	client := &http.Client{Transport: tr}
	get(t, client, "http://x.test/a")
	get(t, client, "http://x.test/b")
	body := serve(p, "/", "").Body.String()
	assert.Contains(t, body, `data-scope="/a" data-breaker="unknown"`)
	assert.Contains(t, body, "not remembered")
	s := readJSON(t, p, "/?format=json")
	require.Len(t, s.Transports[0].Scopes, 2)
	assert.NotNil(t, s.Transports[0].Scopes[0].Breaker, `"breaker": [], not null`)
	assert.Empty(t, s.Transports[0].Scopes[0].Breaker)

	h := p.Watch("long", nil)
	h.GiveUp(retryfuse.GiveUpInfo{Reason: retryfuse.ErrAttemptsExhausted, Err: errors.New(strings.Repeat("é", 10000))})
	e := p.events()[0]
	assert.LessOrEqual(t, len(e.Error), maxErrText)
	assert.True(t, strings.HasSuffix(e.Error, "…"), "a cut text says so")
}
