package retryfuse

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// everyOther answers 503 to odd requests and 200 to even ones: each call
// takes two attempts.
func everyOther(n int, w http.ResponseWriter, _ *http.Request) {
	if n%2 == 1 {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(w, "ok")
}

func TestHooksCallIDsAndAttemptNumbers(t *testing.T) {
	srv := newTestServer(t, everyOther)
	clk := newFakeClock()
	var log hookLog
	tr := newTransport(t, clk, &Transport{Hooks: log.hooks()})
	for range 2 {
		if _, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, "")); err != nil {
			t.Fatalf("Do: %v", err)
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()

	// Two runs of one ID each, in call order.
	var runs []uint64
	for _, id := range log.callIDs {
		if len(runs) == 0 || runs[len(runs)-1] != id {
			runs = append(runs, id)
		}
	}
	if len(runs) != 2 || runs[0] == runs[1] {
		t.Errorf("call IDs of the events in order: got runs %v, want two runs of distinct IDs", runs)
	}
	if len(log.starts) != 4 || len(log.dones) != 4 || len(log.retries) != 2 {
		t.Fatalf("events: got %d starts, %d dones, %d retries; want 4, 4, 2", len(log.starts), len(log.dones), len(log.retries))
	}
	for i := range 4 {
		want := i%2 + 1
		if got := log.starts[i].Attempt; got != want {
			t.Errorf("AttemptStart %d: attempt %d, want %d", i, got, want)
		}
		if got := log.dones[i].Attempt; got != want {
			t.Errorf("AttemptDone %d: attempt %d, want %d", i, got, want)
		}
	}
	for i, r := range log.retries {
		if r.Attempt != 1 || r.Source != "backoff" {
			t.Errorf("Retry %d: attempt %d source %v, want attempt 1 from backoff", i, r.Attempt, r.Source)
		}
		var se *StatusError
		if se, _ = r.Err.(*StatusError); se == nil || se.StatusCode != 503 {
			t.Errorf("Retry %d: Err %v, want a *StatusError for 503", i, r.Err)
		}
	}
	// Elapsed is read from the Transport's clock: the second attempt
	// starts after the recorded wait.
	if got, want := log.starts[1].Elapsed, clk.Sleeps()[0]; got != want {
		t.Errorf("second AttemptStart Elapsed: got %v, want the wait %v", got, want)
	}
}

func TestHooksURLRedacted(t *testing.T) {
	srv := newTestServer(t, everyOther)
	var log hookLog
	tr := newTransport(t, newFakeClock(), &Transport{Hooks: log.hooks()})
	host := strings.TrimPrefix(srv.URL, "http://")
	url := "http://alice:pw@" + host + "/orders?token=abc123&page=1"
	if _, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, url, "")); err != nil {
		t.Fatalf("Do: %v", err)
	}
	want := "http://" + host + "/orders?page=1&token=REDACTED"
	log.mu.Lock()
	defer log.mu.Unlock()
	var urls []string
	for _, e := range log.starts {
		urls = append(urls, e.URL)
	}
	for _, e := range log.dones {
		urls = append(urls, e.URL)
	}
	for _, e := range log.retries {
		urls = append(urls, e.URL)
	}
	for _, e := range log.decisions {
		urls = append(urls, e.URL)
	}
	if len(urls) < 5 {
		t.Fatalf("events carrying a URL: got %d, want at least 5", len(urls))
	}
	for _, got := range urls {
		if got != want {
			t.Errorf("hook URL: got %q, want %q", got, want)
		}
	}
}

func TestPanickingHooksDoNotBreakTheCall(t *testing.T) {
	srv := newTestServer(t, failThenOK(2))
	boom := func() { panic("hook bug") }
	tr := newTransport(t, newFakeClock(), &Transport{Hooks: Hooks{
		AttemptStart: func(AttemptStartInfo) { boom() },
		AttemptDone:  func(AttemptDoneInfo) { boom() },
		Decision:     func(DecisionInfo) { boom() },
		Retry:        func(RetryInfo) { boom() },
		GiveUp:       func(GiveUpInfo) { boom() },
	}})
	resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	if err != nil || resp.StatusCode != 200 || string(body) != "done" {
		t.Fatalf("Do: got %v, %q, %v; want 200 done", resp, body, err)
	}
	if got := srv.count(); got != 3 {
		t.Errorf("requests seen by the server: got %d, want 3", got)
	}
}

func TestJoinHooksCallsEachAndSurvivesAPanickingOne(t *testing.T) {
	srv := newTestServer(t, everyOther)
	var a, b hookLog
	var panicked atomic.Int32
	first := Hooks{AttemptStart: func(AttemptStartInfo) { panicked.Add(1); panic("first hook bug") }}
	tr := newTransport(t, newFakeClock(), &Transport{Hooks: JoinHooks(first, a.hooks(), Hooks{}, b.hooks())})
	if _, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, "")); err != nil {
		t.Fatalf("Do: %v", err)
	}
	if got := panicked.Load(); got != 2 {
		t.Errorf("panicking first hook: called %d times, want 2", got)
	}
	for name, l := range map[string]*hookLog{"first log": &a, "second log": &b} {
		l.mu.Lock()
		if len(l.starts) != 2 || len(l.dones) != 2 || len(l.retries) != 1 || len(l.decisions) == 0 {
			t.Errorf("%s: got %d starts, %d dones, %d retries, %d decisions; want 2, 2, 1, some",
				name, len(l.starts), len(l.dones), len(l.retries), len(l.decisions))
		}
		l.mu.Unlock()
	}
	if h := JoinHooks(); h.AttemptStart != nil || h.GiveUp != nil || h.Retry != nil {
		t.Errorf("JoinHooks(): got non-nil fields, want all nil")
	}
}

// net/http re-sends a GET by itself when a reused connection is dropped
// after the request was read; the transport reports it.
func TestHiddenResendReported(t *testing.T) {
	srv := newRawServer(t, func(s *rawServer, connNo int, c net.Conn, br *bufio.Reader) {
		for i := 0; ; i++ {
			if _, err := s.readRequest(br); err != nil {
				return
			}
			if connNo == 0 && i == 1 {
				return // drop the second request of the first connection
			}
			if writeResponse(c, 200, "ok") != nil {
				return
			}
		}
	})
	var log hookLog
	tr := newTransport(t, newFakeClock(), &Transport{Hooks: log.hooks()})
	for range 2 {
		if _, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL(), "")); err != nil {
			t.Fatalf("Do: %v", err)
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.hidden) != 1 || log.hidden[0].Connections != 2 || log.hidden[0].Attempt != 1 {
		t.Errorf("HiddenResend events: got %+v, want one for attempt 1 with 2 connections", log.hidden)
	}
	if got := len(srv.requests()); got != 3 {
		t.Errorf("requests seen by the server: got %d, want 3", got)
	}
}

// Hooks set after Validate (which the Transport's doc allows: its fields
// are frozen by the first RoundTrip) report the time since RoundTrip was
// called, not the time since year 1.
func TestElapsedOfHooksSetAfterValidate(t *testing.T) {
	clk := newFakeClock()
	tr := newTransport(t, clk, &Transport{Base: always503(), Retry: RetryPolicy{MaxAttempts: 2, MaxCallCost: 100}})
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	var log hookLog
	tr.Hooks = log.hooks()
	if _, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://api.example.test/", "")); err != nil {
		t.Fatal(err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.decisions) == 0 || len(log.dones) != 2 {
		t.Fatalf("events: got %d decisions and %d attempts done, want some and 2", len(log.decisions), len(log.dones))
	}
	if got := log.decisions[0].Elapsed; got != 0 {
		t.Errorf("Elapsed of the first Decision: got %v, want 0 (the fake clock has not moved)", got)
	}
	wait := clk.Sleeps()
	if got, want := log.dones[1].Elapsed, wait[0]; got != want || got > time.Hour {
		t.Errorf("Elapsed of the second AttemptDone: got %v, want %v (the one wait)", got, want)
	}
}

// Every field of Hooks is seen by any, joined by JoinHooks and set by
// sloghooks.New: a hook added to the struct but not to them fails here.
func TestEveryHookIsJoinedCountedAndLogged(t *testing.T) {
	typ := reflect.TypeOf(Hooks{})
	logged := reflect.ValueOf(SloghooksNew(slog.New(slog.DiscardHandler)))
	for i := range typ.NumField() {
		f := typ.Field(i)
		calls := 0
		var one Hooks
		reflect.ValueOf(&one).Elem().Field(i).Set(reflect.MakeFunc(f.Type, func([]reflect.Value) []reflect.Value {
			calls++
			return nil
		}))
		if !one.any() {
			t.Errorf("Hooks{%s: f}.any() = false, want true", f.Name)
		}
		joined := reflect.ValueOf(JoinHooks(one, Hooks{}, one)).Field(i)
		if joined.IsNil() {
			t.Errorf("JoinHooks dropped %s", f.Name)
			continue
		}
		joined.Call([]reflect.Value{reflect.Zero(f.Type.In(0))})
		if calls != 2 {
			t.Errorf("JoinHooks(h, {}, h).%s called h's hook %d times, want 2", f.Name, calls)
		}
		if logged.Field(i).IsNil() {
			t.Errorf("sloghooks.New leaves %s nil", f.Name)
		}
	}
	if (Hooks{}).any() {
		t.Error("Hooks{}.any() = true, want false")
	}
}

// The base's own re-sends within an attempt (net/http re-sending a GET on
// a dead idle connection, say) count against MaxAttempts and take retries
// from the budget: they load the dependency as retries do.
func TestHiddenResendsCountAgainstAttemptsAndBudget(t *testing.T) {
	sent := 0
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		trace := httptrace.ContextClientTrace(r.Context())
		for range 3 { // three connections: the request went out three times
			trace.GetConn(r.URL.Host)
			trace.GotConn(httptrace.GotConnInfo{})
			sent++
		}
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Body: http.NoBody, Request: r}, nil
	})
	budget, err := budget.NewTokenBucket(budget.TokenBucketConfig{Capacity: 10})
	require.NoError(t, err)
	var hidden []AttemptDoneInfo
	tr := newTransport(t, newFakeClock(), &Transport{
		Base: base,
		Retry: RetryPolicy{
			MaxAttempts: 5,
			Budget:      budget,
		},
		Hooks: Hooks{HiddenResend: func(i AttemptDoneInfo) { hidden = append(hidden, i) }},
	})
	resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://api.example/items", ""))
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	// Attempt 1 sent 3 requests; attempt 2 makes 6 of MaxAttempts 5: no third.
	assert.Equal(t, 6, sent, "requests sent: got %d, want 6 (two attempts of three; the re-sends count against MaxAttempts 5)", sent)
	require.Len(t, hidden, 2)
	s := budget.Snapshot()
	assert.Equal(t, uint64(5), s.Retries, "budget: got %d retries taken, want 5 (one retry and four re-sends)", s.Retries)
}
