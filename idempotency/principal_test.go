package idempotency

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/ledger"
)

// One principal's key is never another's: the credentials a request
// carries are part of what a repeat under its key must match.

// sessionHandler counts its runs and answers 201 with a body and a
// session cookie of the caller's own.
type sessionHandler struct{ counter }

func (s *sessionHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: "session", Value: "secret-of-" + r.Header.Get("Authorization")})
	s.counter.ServeHTTP(w, r)
}

// as returns a POST of body under key, carrying the Authorization auth
// (none when empty).
func as(auth, key, body string) *http.Request {
	r := post("/refunds", key, body)
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	return r
}

// refusedAsAnotherPrincipal fails the test unless w is the 422 of a key
// used under other credentials, carrying nothing of the first response.
func refusedAsAnotherPrincipal(t *testing.T, w *httptest.ResponseRecorder, first string) {
	t.Helper()
	p := problemOf(t, w, ProblemKeyReused, http.StatusUnprocessableEntity)
	if !strings.Contains(p.Detail, "other credentials") {
		t.Errorf("detail %q does not say that the credentials differ", p.Detail)
	}
	if w.Header().Get(HeaderReplayed) != "" || len(w.Result().Cookies()) != 0 || strings.Contains(w.Body.String(), first) {
		t.Errorf("the refusal carries the first response: replayed %q, cookies %v, body %s",
			w.Header().Get(HeaderReplayed), w.Result().Cookies(), w.Body)
	}
}

func TestAnotherPrincipalUnderTheSameKeyGetsNeitherBodyNorCookie(t *testing.T) {
	next := &sessionHandler{}
	h, _ := newHandler(t, next, Config{})
	a := serve(h, as("Bearer token-of-A", "order-123-refund", `{"amount":100}`))
	if a.Code != http.StatusCreated || len(a.Result().Cookies()) != 1 {
		t.Fatalf("A: %d, cookies %v; want 201 with its session cookie", a.Code, a.Result().Cookies())
	}
	b := serve(h, as("Bearer token-of-B", "order-123-refund", `{"amount":100}`))
	refusedAsAnotherPrincipal(t, b, "run-1")
	anon := serve(h, as("", "order-123-refund", `{"amount":100}`))
	refusedAsAnotherPrincipal(t, anon, "run-1")
	if n := next.runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
	again := serve(h, as("Bearer token-of-A", "order-123-refund", `{"amount":100}`))
	if again.Header().Get(HeaderReplayed) != "true" || again.Header().Get("X-Run") != "run-1" {
		t.Errorf("A's repeat: %d, replayed %q, X-Run %q; want its stored response", again.Code, again.Header().Get(HeaderReplayed), again.Header().Get("X-Run"))
	}
	if c := again.Result().Cookies(); len(c) != 0 {
		t.Errorf("A's repeat replays the cookies %v: Set-Cookie must never be stored", c)
	}
}

// A principal's request may come to any server of a fleet: B's request
// under A's key is refused on another instance of one Ledger.
func TestAnotherPrincipalIsRefusedAcrossInstancesOfOneLedger(t *testing.T) {
	l := &ledger.Memory{}
	next := &sessionHandler{}
	one, _ := newHandler(t, next, Config{Ledger: l})
	two, _ := newHandler(t, next, Config{Ledger: l})
	serve(one, as("Bearer token-of-A", "order-123-refund", "{}"))
	refusedAsAnotherPrincipal(t, serve(two, as("Bearer token-of-B", "order-123-refund", "{}")), "run-1")
	if w := serve(two, as("Bearer token-of-A", "order-123-refund", "{}")); w.Header().Get(HeaderReplayed) != "true" {
		t.Errorf("A's repeat on the other instance: %d, want its replay", w.Code)
	}
	if n := next.runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
}

// B's request is refused whatever the state of A's key: B is never told
// to wait for A's request, nor that its outcome is unknown.
func TestAnotherPrincipalIsRefusedWhileInFlightAndWhenUncertain(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	h, _ := newHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Panic") != "" {
			panic(http.ErrAbortHandler)
		}
		close(entered)
		<-release
		w.WriteHeader(http.StatusCreated)
	}), Config{})
	var wg sync.WaitGroup
	wg.Go(func() { serve(h, as("Bearer A", "k", "{}")) })
	<-entered
	refusedAsAnotherPrincipal(t, serve(h, as("Bearer B", "k", "{}")), "never")
	close(release)
	wg.Wait()

	func() {
		defer func() { recover() }()
		r := as("Bearer A", "k2", "{}")
		r.Header.Set("X-Panic", "1")
		serve(h, r)
	}()
	refusedAsAnotherPrincipal(t, serve(h, as("Bearer B", "k2", "{}")), "never")
}

// A token refreshed between a write and its repeat: the repeat is
// refused, visibly, and the handler does not run twice.
func TestRotatedTokenIsRefusedNotRunAgain(t *testing.T) {
	next := &counter{}
	h, _ := newHandler(t, next, Config{})
	serve(h, as("Bearer old", "k", "{}"))
	refusedAsAnotherPrincipal(t, serve(h, as("Bearer refreshed", "k", "{}")), "run-1")
	if n := next.runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
}

// With a Scope naming the verified principal, a rotated token of the same
// principal gets its replay, and another principal's key is another key.
func TestScopeReplaysToItsPrincipalAcrossRotatedTokens(t *testing.T) {
	next := &counter{}
	principal := map[string]string{"Bearer a1": "alice", "Bearer a2": "alice", "Bearer b1": "bob"}
	h, _ := newHandler(t, next, Config{Scope: func(r *http.Request) string { return principal[r.Header.Get("Authorization")] }})
	serve(h, as("Bearer a1", "k", "{}"))
	if w := serve(h, as("Bearer a2", "k", "{}")); w.Header().Get(HeaderReplayed) != "true" || w.Header().Get("X-Run") != "run-1" {
		t.Errorf("alice, token rotated: %d, X-Run %q; want her replay", w.Code, w.Header().Get("X-Run"))
	}
	if w := serve(h, as("Bearer b1", "k", "{}")); w.Code != http.StatusCreated || w.Header().Get(HeaderReplayed) != "" || w.Header().Get("X-Run") != "run-2" {
		t.Errorf("bob under alice's key: %d, X-Run %q; want a run of his own", w.Code, w.Header().Get("X-Run"))
	}
}

// A Scope with credentials named binds them as well.
func TestScopeWithCredentialsNamedBindsThem(t *testing.T) {
	next := &counter{}
	h, _ := newHandler(t, next, Config{Scope: func(*http.Request) string { return "tenant" },
		Credentials: retryfuse.Credentials{Headers: []string{"authorization"}}})
	serve(h, as("Bearer a1", "k", "{}"))
	refusedAsAnotherPrincipal(t, serve(h, as("Bearer a2", "k", "{}")), "run-1")
}

func TestNamedSessionCookieIsBoundAndOtherCookiesAreNot(t *testing.T) {
	next := &counter{}
	h, _ := newHandler(t, next, Config{Credentials: retryfuse.Credentials{Headers: []string{}, Cookies: []string{"sid"}}})
	withCookies := func(cookie string) *http.Request {
		r := as("", "k", "{}")
		r.Header.Set("Cookie", cookie)
		return r
	}
	serve(h, withCookies("_ga=1; sid=alice"))
	if w := serve(h, withCookies("sid=alice; _ga=2; theme=dark")); w.Header().Get(HeaderReplayed) != "true" {
		t.Errorf("the same session, other cookies: %d, want the replay", w.Code)
	}
	refusedAsAnotherPrincipal(t, serve(h, withCookies("_ga=1; sid=mallory")), "run-1")
	refusedAsAnotherPrincipal(t, serve(h, withCookies("_ga=1")), "run-1")
	if n := next.runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
}

// Credentials named as nothing: every caller trusted alike, as before.
func TestNoCredentialsNamedReplaysToAnyCaller(t *testing.T) {
	h, _ := newHandler(t, &counter{}, Config{Credentials: retryfuse.Credentials{Headers: []string{}}})
	serve(h, as("Bearer A", "k", "{}"))
	if w := serve(h, as("Bearer B", "k", "{}")); w.Header().Get(HeaderReplayed) != "true" {
		t.Errorf("with no credentials named: %d, want the replay", w.Code)
	}
}

// A request that carries no credentials keeps the fingerprint it had
// before credentials were bound (keys stored then keep their answers); one
// that carries them has another, which holds no credential byte.
func TestFingerprintWithoutCredentialsIsUnchanged(t *testing.T) {
	spy := &spyLedger{Ledger: &ledger.Memory{}}
	h, _ := newHandler(t, &counter{}, Config{Ledger: spy})
	serve(h, as("", "k1", "{}"))
	serve(h, as("Bearer secret-token", "k2", "{}"))
	plain := FingerprintOf(http.MethodPost, "/refunds", "", []byte("{}"))
	if spy.fps[0] != plain {
		t.Errorf("without credentials: fingerprint %x, want %x (FingerprintOf)", spy.fps[0], plain)
	}
	if spy.fps[1] == plain {
		t.Error("with credentials: the fingerprint is the one without")
	}
	for i, key := range spy.keys {
		if strings.Contains(key, "secret-token") || bytes.Contains(spy.fps[i][:], []byte("secret")) {
			t.Errorf("the ledger is given a credential: key %q, fingerprint %x", key, spy.fps[i])
		}
	}
}

// completeSpy records the responses the Ledger is asked to store.
type completeSpy struct {
	ledger.Ledger
	mu     sync.Mutex
	stored []*ledger.StoredResponse
}

func (l *completeSpy) Complete(ctx context.Context, key, token string, res *ledger.StoredResponse) error {
	l.mu.Lock()
	l.stored = append(l.stored, res)
	l.mu.Unlock()
	return l.Ledger.Complete(ctx, key, token, res)
}

func TestSetCookieAndUnstoredHeadersAreSentButNeverStored(t *testing.T) {
	spy := &completeSpy{Ledger: &ledger.Memory{}}
	h, _ := newHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "session", Value: "s3cr3t"})
		w.Header().Set("X-Api-Secret", "per-caller")
		w.Header().Set("Location", "/refunds/1")
		w.WriteHeader(http.StatusCreated)
	}), Config{Ledger: spy, UnstoredHeaders: []string{"x-api-secret"}})
	first := serve(h, as("Bearer A", "k", "{}"))
	if first.Header().Get("Set-Cookie") == "" || first.Header().Get("X-Api-Secret") == "" {
		t.Errorf("the first response lost its header: %v", first.Header())
	}
	if len(spy.stored) != 1 || spy.stored[0] == nil {
		t.Fatalf("stored %v, want one response", spy.stored)
	}
	got := spy.stored[0].Header
	if got.Get("Set-Cookie") != "" || got.Get("X-Api-Secret") != "" || got.Get("Location") != "/refunds/1" {
		t.Errorf("stored header %v: want Location, without Set-Cookie and X-Api-Secret", got)
	}
}

func TestTxModeBindsCredentialsAndStoresNoCookie(t *testing.T) {
	l := newTxLedger(t)
	next := &sessionHandler{}
	h, _ := newHandler(t, next, Config{Ledger: l})
	if w := serve(h, as("Bearer A", "k", "{}")); w.Code != http.StatusCreated || len(w.Result().Cookies()) != 1 {
		t.Fatalf("A: %d, cookies %v; want 201 with its cookie", w.Code, w.Result().Cookies())
	}
	refusedAsAnotherPrincipal(t, serve(h, as("Bearer B", "k", "{}")), "run-1")
	if w := serve(h, as("Bearer A", "k", "{}")); w.Header().Get(HeaderReplayed) != "true" || len(w.Result().Cookies()) != 0 {
		t.Errorf("A's repeat: %d, replayed %q, cookies %v; want the replay without cookies", w.Code, w.Header().Get(HeaderReplayed), w.Result().Cookies())
	}
	if n := next.runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
}

// The key of the hash changed: keys stored under the previous one keep
// their answers while it is listed, and only then.
func TestPreviousKeysKeepStoredAnswersAcrossAKeyChange(t *testing.T) {
	old, current := []byte("0123456789abcdef-old"), []byte("0123456789abcdef-new")
	l := &ledger.Memory{}
	next := &counter{}
	before, _ := newHandler(t, next, Config{Ledger: l, Credentials: retryfuse.Credentials{Key: old}})
	serve(before, as("Bearer A", "k", "{}"))
	serve(before, as("Bearer A", "k-other", "{}"))

	after, _ := newHandler(t, next, Config{Ledger: l, Credentials: retryfuse.Credentials{Key: current, PreviousKeys: [][]byte{old}}})
	if w := serve(after, as("Bearer A", "k", "{}")); w.Header().Get(HeaderReplayed) != "true" {
		t.Errorf("A under the previous key: %d, want the replay", w.Code)
	}
	refusedAsAnotherPrincipal(t, serve(after, as("Bearer B", "k", "{}")), "run-1")
	dropped, _ := newHandler(t, next, Config{Ledger: l, Credentials: retryfuse.Credentials{Key: current}})
	problemOf(t, serve(dropped, as("Bearer A", "k-other", "{}")), ProblemKeyReused, http.StatusUnprocessableEntity)
	if n := next.runs.Load(); n != 2 {
		t.Errorf("the handler ran %d times, want 2", n)
	}
}

func TestNewRefusesInvalidCredentials(t *testing.T) {
	for name, cfg := range map[string]Config{
		"a header name with a space": {Credentials: retryfuse.Credentials{Headers: []string{"X Tenant"}}},
		"an empty header name":       {Credentials: retryfuse.Credentials{Headers: []string{""}}},
		"a cookie name with ;":       {Credentials: retryfuse.Credentials{Cookies: []string{"a;b"}}},
		"a short key":                {Credentials: retryfuse.Credentials{Key: []byte("short")}},
		"a short previous key":       {Credentials: retryfuse.Credentials{Key: []byte("0123456789abcdef"), PreviousKeys: [][]byte{{1}}}},
		"an empty unstored header":   {UnstoredHeaders: []string{""}},
	} {
		if _, err := New(&counter{}, cfg); !errors.Is(err, retryfuse.ErrInvalidPolicy) || !strings.Contains(err.Error(), "Config.") {
			t.Errorf("%s: %v, want ErrInvalidPolicy naming the field", name, err)
		}
	}
}
