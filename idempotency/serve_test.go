package idempotency

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/ledger"
	"github.com/retryfuse/retryfuse/retryfusetest"
)

func TestReplayIsTheFirstResponse(t *testing.T) {
	c := &counter{}
	h, _ := newHandler(t, c, Config{})
	first := serve(h, post("/charges", "k", "payload"))
	second := serve(h, post("/charges", "k", "payload"))
	if first.Code != http.StatusCreated || first.Body.String() != "created payload" {
		t.Fatalf("first: %d %q, want 201 %q", first.Code, first.Body, "created payload")
	}
	if first.Header().Get(HeaderReplayed) != "" {
		t.Errorf("the first response is marked replayed")
	}
	if second.Code != first.Code || second.Body.String() != first.Body.String() {
		t.Errorf("replay: %d %q, want %d %q", second.Code, second.Body, first.Code, first.Body)
	}
	for _, name := range []string{"Content-Type", "X-Run"} {
		if got, want := second.Header().Get(name), first.Header().Get(name); got != want {
			t.Errorf("replay: %s %q, want %q", name, got, want)
		}
	}
	if second.Header().Get(HeaderReplayed) != "true" || second.Header().Get(HeaderHonoured) != "?1" {
		t.Errorf("replay: %s %q, %s %q; want true, ?1", HeaderReplayed, second.Header().Get(HeaderReplayed),
			HeaderHonoured, second.Header().Get(HeaderHonoured))
	}
	if c.runs.Load() != 1 {
		t.Errorf("the handler ran %d times, want 1", c.runs.Load())
	}
}

// An error the handler answered is its result: replayed, not run again
// (draft Section 2.6: "success or an error").
func TestErrorResponseIsReplayed(t *testing.T) {
	runs := 0
	h, _ := newHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		http.Error(w, "card declined", http.StatusPaymentRequired)
	}), Config{})
	serve(h, post("/charges", "k", "x"))
	w := serve(h, post("/charges", "k", "x"))
	if w.Code != http.StatusPaymentRequired || w.Body.String() != "card declined\n" || runs != 1 {
		t.Errorf("repeat: %d %q after %d runs; want 402 %q after 1", w.Code, w.Body, runs, "card declined\n")
	}
}

func TestUnhandledRequestsPassThrough(t *testing.T) {
	c := &counter{}
	h, _ := newHandler(t, c, Config{Route: func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/api/") }})
	for _, r := range []*http.Request{
		httptest.NewRequest(http.MethodGet, "/api/charges", nil),
		httptest.NewRequest(http.MethodPut, "/api/charges/1", strings.NewReader("x")),
		post("/other", "", "x"),    // not the route: no key needed
		post("/other", "k", "x"),   // not the route: the key is not claimed...
		post("/other", "k", "x"),   // ...so the repeat runs too
		post("/other", "\x01", ""), // nor looked at
	} {
		before := c.runs.Load()
		w := serve(h, r)
		if c.runs.Load() != before+1 || w.Code != http.StatusCreated {
			t.Errorf("%s %s: status %d, ran %d times; want the handler's 201, once", r.Method, r.URL, w.Code, c.runs.Load()-before)
		}
		if w.Header().Get(HeaderHonoured) != "" {
			t.Errorf("%s %s: a request passed through carries %s", r.Method, r.URL, HeaderHonoured)
		}
	}
}

func TestMethodsConfigured(t *testing.T) {
	c := &counter{}
	h, _ := newHandler(t, c, Config{Methods: []string{http.MethodPut}})
	put := func() *http.Request {
		r := post("/x", "k", "x")
		r.Method = http.MethodPut
		return r
	}
	serve(h, put())
	if w := serve(h, put()); w.Header().Get(HeaderReplayed) != "true" {
		t.Errorf("a PUT repeat was not replayed: %d", w.Code)
	}
	if w := serve(h, post("/x", "", "x")); w.Code != http.StatusCreated {
		t.Errorf("a POST, not among Methods, got %d, want it passed through", w.Code)
	}
}

func TestKeyOptional(t *testing.T) {
	c := &counter{}
	h, _ := newHandler(t, c, Config{KeyOptional: true})
	w := serve(h, post("/charges", "", "x"))
	if w.Code != http.StatusCreated || w.Header().Get(HeaderHonoured) != "?1" {
		t.Errorf("no key: %d, %s %q; want the handler's 201, ?1", w.Code, HeaderHonoured, w.Header().Get(HeaderHonoured))
	}
	problemOf(t, serve(h, post("/charges", "\x01", "x")), ProblemKeyMalformed, http.StatusBadRequest)
}

func TestScopeSeparatesKeys(t *testing.T) {
	c := &counter{}
	h, _ := newHandler(t, c, Config{Scope: func(r *http.Request) string { return r.Header.Get("X-Tenant") }})
	send := func(tenant string) *httptest.ResponseRecorder {
		r := post("/charges", "k", "x")
		r.Header.Set("X-Tenant", tenant)
		return serve(h, r)
	}
	send("a")
	if w := send("b"); w.Header().Get(HeaderReplayed) != "" {
		t.Errorf("tenant b got tenant a's response under the same key")
	}
	if w := send("a"); w.Header().Get(HeaderReplayed) != "true" {
		t.Errorf("tenant a's repeat was not replayed")
	}
	// A scope that ends as a key begins is kept apart from it.
	c2 := &counter{}
	h2, _ := newHandler(t, c2, Config{Scope: func(r *http.Request) string { return r.Header.Get("X-Tenant") }})
	for _, p := range [][2]string{{"a b", "c"}, {"a", "b c"}} {
		r := post("/charges", p[1], "x")
		r.Header.Set("X-Tenant", p[0])
		if w := serve(h2, r); w.Header().Get(HeaderReplayed) != "" {
			t.Errorf("scope %q key %q got another's response", p[0], p[1])
		}
	}
}

func TestHandlerReadsTheBufferedBody(t *testing.T) {
	var got []byte
	h, _ := newHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
	}), Config{})
	body := strings.Repeat("0123456789", 10000)
	r := post("/charges", "k", body)
	r.ContentLength = -1 // length unknown, as for a chunked body
	serve(h, r)
	if string(got) != body {
		t.Errorf("the handler read %d bytes, want the %d sent", len(got), len(body))
	}
}

func TestBodyTooLargeIsNotRun(t *testing.T) {
	c := &counter{}
	h, _ := newHandler(t, c, Config{MaxBodyBytes: 10})
	for _, tt := range []struct {
		name   string
		length int64
	}{{"length known", 11}, {"length unknown", -1}} {
		r := post("/charges", "k", "01234567890")
		r.ContentLength = tt.length
		problemOf(t, serve(h, r), ProblemBodyTooLarge, http.StatusRequestEntityTooLarge)
	}
	if w := serve(h, post("/charges", "k", "0123456789")); w.Code != http.StatusCreated {
		t.Errorf("a body of exactly MaxBodyBytes: %d, want 201", w.Code)
	}
	if c.runs.Load() != 1 {
		t.Errorf("the handler ran %d times, want 1", c.runs.Load())
	}
}

type failingBody struct{}

func (failingBody) Read([]byte) (int, error) { return 0, errors.New("connection reset") }
func (failingBody) Close() error             { return nil }

func TestUnreadableBodyIsNotRun(t *testing.T) {
	c := &counter{}
	h, q := newHandler(t, c, Config{})
	r := post("/charges", "k", "")
	r.Body = failingBody{}
	if w := serve(h, r); w.Code != http.StatusBadRequest || c.runs.Load() != 0 {
		t.Errorf("status %d after %d runs, want 400 after none", w.Code, c.runs.Load())
	}
	// The key was not claimed: the request sent again whole runs.
	if w := serve(h, post("/charges", "k", "")); w.Code != http.StatusCreated {
		t.Errorf("the request sent again: %d, want 201 (log: %s)", w.Code, q)
	}
}

func TestWriteHeaderTwiceRecordsTheFirst(t *testing.T) {
	h, _ := newHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		w.Header().Set("X-Late", "1") // after the header was sent: not part of the response
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, "ok")
	}), Config{})
	first := serve(h, post("/x", "k", ""))
	second := serve(h, post("/x", "k", ""))
	if first.Code != http.StatusAccepted || second.Code != http.StatusAccepted || second.Body.String() != "ok" {
		t.Errorf("first %d, replay %d %q; want 202, 202 %q", first.Code, second.Code, second.Body, "ok")
	}
	if second.Header().Get("X-Late") != "" {
		t.Errorf("the replay carries a header set after the first was sent")
	}
}

func TestInformationalStatusIsNotTheResult(t *testing.T) {
	h, _ := newHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusCreated)
	}), Config{})
	serve(h, post("/x", "k", ""))
	if w := serve(h, post("/x", "k", "")); w.Code != http.StatusCreated {
		t.Errorf("replay: %d, want 201, the final status", w.Code)
	}
}

func TestResponseTooLargeIsNotStored(t *testing.T) {
	runs := 0
	big := strings.Repeat("b", 100)
	h, _ := newHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		io.WriteString(w, big[:50])
		io.WriteString(w, big[50:])
	}), Config{MaxStoredBody: 99})
	if w := serve(h, post("/x", "k", "")); w.Body.String() != big {
		t.Errorf("first: got %d bytes, want the whole %d", w.Body.Len(), len(big))
	}
	problemOf(t, serve(h, post("/x", "k", "")), ProblemNotStored, http.StatusConflict)
	if runs != 1 {
		t.Errorf("the handler ran %d times, want 1", runs)
	}
}

func TestTrailersAreNotStored(t *testing.T) {
	h, _ := newHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Checksum")
		io.WriteString(w, "data")
		w.Header().Set("X-Checksum", "abc")
	}), Config{})
	serve(h, post("/x", "k", ""))
	problemOf(t, serve(h, post("/x", "k", "")), ProblemNotStored, http.StatusConflict)
}

func TestHeaderBeyondBoundsIsNotStored(t *testing.T) {
	h, _ := newHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := range 101 {
			w.Header().Add("X-Many", itoa(int64(i)))
		}
	}), Config{})
	serve(h, post("/x", "k", ""))
	problemOf(t, serve(h, post("/x", "k", "")), ProblemNotStored, http.StatusConflict)
}

func TestHandlerWithoutWritesStores200(t *testing.T) {
	h, _ := newHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Done", "yes")
	}), Config{})
	serve(h, post("/x", "k", ""))
	if w := serve(h, post("/x", "k", "")); w.Code != http.StatusOK || w.Header().Get("X-Done") != "yes" {
		t.Errorf("replay: %d, X-Done %q; want 200, yes", w.Code, w.Header().Get("X-Done"))
	}
}

func TestPanicLeavesTheKeyUncertain(t *testing.T) {
	runs := 0
	h, _ := newHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
		panic("effect applied, then a bug")
	}), Config{})
	func() {
		defer func() {
			if p := recover(); p != "effect applied, then a bug" {
				t.Errorf("recovered %v, want the handler's panic to go on", p)
			}
		}()
		serve(h, post("/x", "k", ""))
	}()
	w := serve(h, post("/x", "k", ""))
	problemOf(t, w, ProblemOutcomeUnknown, http.StatusConflict)
	if w.Header().Get("Retry-After") != "" {
		t.Errorf("Retry-After %q on an uncertain key: waiting does not help", w.Header().Get("Retry-After"))
	}
	if runs != 1 {
		t.Errorf("the handler ran %d times, want 1", runs)
	}
}

func TestRerunUncertainRunsAgain(t *testing.T) {
	// The first run applies its effect and crashes (http.ErrAbortHandler).
	charges := retryfusetest.NewRecorder()
	created := charges.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) }))
	h, _ := newHandler(t, retryfusetest.NewHandler(created, retryfusetest.ApplyThenReset()), Config{RerunUncertain: true})
	func() {
		defer func() { recover() }()
		serve(h, post("/x", "k", ""))
	}()
	if w := serve(h, post("/x", "k", "")); w.Code != http.StatusCreated || charges.Total() != 2 {
		t.Errorf("repeat: %d after %d runs, want 201 after 2", w.Code, charges.Total())
	}
	if w := serve(h, post("/x", "k", "")); w.Header().Get(HeaderReplayed) != "true" || charges.Total() != 2 {
		t.Errorf("third: %d, replayed %q, after %d runs; want the replay after 2", w.Code, w.Header().Get(HeaderReplayed), charges.Total())
	}
}

func TestLedgerDownFailsClosed(t *testing.T) {
	c := &counter{}
	h, q := newHandler(t, c, Config{Ledger: stubLedger{errLedgerDown}, RetryAfter: 5 * time.Second})
	w := serve(h, post("/x", "k", ""))
	problemOf(t, w, ProblemLedgerUnavailable, http.StatusServiceUnavailable)
	if got := w.Header().Get("Retry-After"); got != "5" {
		t.Errorf("Retry-After %q, want 5", got)
	}
	if c.runs.Load() != 0 {
		t.Errorf("the handler ran with the ledger down")
	}
	if !strings.Contains(q.String(), "ledger down") {
		t.Errorf("the ledger's failure was not logged: %q", q)
	}
}

// completeFails is a ledger.Memory whose Complete fails.
type completeFails struct{ *ledger.Memory }

func (completeFails) Complete(context.Context, string, string, *ledger.StoredResponse) error {
	return errLedgerDown
}

// A response sent whose outcome the ledger could not record: the client
// has it, the failure is logged, and the key stays claimed (a repeat is
// in flight) rather than free.
func TestCompleteFailureIsLogged(t *testing.T) {
	c := &counter{}
	h, q := newHandler(t, c, Config{Ledger: completeFails{newMemoryLedger(t)}})
	if w := serve(h, post("/x", "k", "")); w.Code != http.StatusCreated {
		t.Errorf("first: %d, want the handler's 201", w.Code)
	}
	if !strings.Contains(q.String(), "could not record the handler's response") {
		t.Errorf("log %q lacks the failed Complete", q)
	}
	problemOf(t, serve(h, post("/x", "k", "")), ProblemInFlight, http.StatusConflict)
	if c.runs.Load() != 1 {
		t.Errorf("the handler ran %d times, want 1", c.runs.Load())
	}
}

// The steps that record an outcome run detached from the request's
// cancellation, bounded.
func TestSettleContextIsDetachedAndBounded(t *testing.T) {
	spy := &spyLedger{Ledger: newMemoryLedger(t)}
	for _, panics := range []bool{false, true} {
		h, _ := newHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if panics {
				panic(http.ErrAbortHandler)
			}
		}), Config{Ledger: spy})
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // the client has gone
		func() {
			defer func() { recover() }()
			serve(h, post("/x", "k"+itoa(int64(len(spy.steps))), "").WithContext(ctx))
		}()
	}
	if want := []string{"complete", "uncertain"}; strings.Join(spy.steps, ",") != strings.Join(want, ",") {
		t.Fatalf("steps %v, want %v", spy.steps, want)
	}
	for i, c := range spy.ctxs {
		if c.err != nil || !c.hasDL || time.Until(c.deadline) > settleTimeout {
			t.Errorf("%s: context error %v, deadline %v (set: %v); want live, within %v", spy.steps[i], c.err, c.deadline, c.hasDL, settleTimeout)
		}
	}
}

func TestNewRefusesInvalidConfig(t *testing.T) {
	next := &counter{}
	for _, tt := range []struct {
		name string
		next http.Handler
		cfg  Config
	}{
		{"next", nil, Config{}},
		{"MaxBodyBytes", next, Config{MaxBodyBytes: -1}},
		{"MaxStoredBody", next, Config{MaxStoredBody: -1}},
		{"RetryAfter", next, Config{RetryAfter: -time.Second}},
		{"Methods", next, Config{Methods: []string{"POST", ""}}},
	} {
		if _, err := New(tt.next, tt.cfg); !errors.Is(err, retryfuse.ErrInvalidPolicy) || !strings.Contains(err.Error(), tt.name) {
			t.Errorf("%s: got %v, want an error wrapping ErrInvalidPolicy that names it", tt.name, err)
		}
	}
}

// The zero Config works: a ledger.Memory of the Handler's own.
func TestZeroConfigHasALedger(t *testing.T) {
	c := &counter{}
	h, err := New(c, Config{})
	if err != nil {
		t.Fatal(err)
	}
	serve(h, post("/x", "k", ""))
	if w := serve(h, post("/x", "k", "")); w.Header().Get(HeaderReplayed) != "true" || c.runs.Load() != 1 {
		t.Errorf("repeat: %d, replayed %q, %d runs; want the replay after 1", w.Code, w.Header().Get(HeaderReplayed), c.runs.Load())
	}
}
