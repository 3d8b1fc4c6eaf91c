package retryfuse

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/ledger"
)

// responseBodies is a base that wraps every response body in one that
// records its Close, so that a test sees each body the transport was
// handed — the discarded ones and the one it returns.
type responseBodies struct {
	rt  *http.Transport
	mu  sync.Mutex
	all []*responseBody
}

type responseBody struct {
	io.ReadCloser
	resp   *http.Response
	closed atomic.Bool
}

func (b *responseBody) Close() error {
	b.closed.Store(true)
	return b.ReadCloser.Close()
}

func (c *responseBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(r)
	if resp != nil {
		b := &responseBody{ReadCloser: resp.Body, resp: resp}
		resp.Body = b
		c.mu.Lock()
		c.all = append(c.all, b)
		c.mu.Unlock()
	}
	return resp, err
}

func (c *responseBodies) CloseIdleConnections() { c.rt.CloseIdleConnections() }

// open returns the bodies not closed yet, and how many there are in all.
func (c *responseBodies) open() (open []*responseBody, total int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.all {
		if !b.closed.Load() {
			open = append(open, b)
		}
	}
	return open, len(c.all)
}

// panickingHooks panic in every hook.
func panickingHooks() Hooks {
	return Hooks{
		AttemptStart:  func(AttemptStartInfo) { panic("AttemptStart") },
		AttemptDone:   func(AttemptDoneInfo) { panic("AttemptDone") },
		Decision:      func(DecisionInfo) { panic("Decision") },
		Retry:         func(RetryInfo) { panic("Retry") },
		Reconcile:     func(ReconcileInfo) { panic("Reconcile") },
		GiveUp:        func(GiveUpInfo) { panic("GiveUp") },
		HiddenResend:  func(AttemptDoneInfo) { panic("HiddenResend") },
		BreakerChange: func(breaker.Change) { panic("BreakerChange") },
	}
}

// openBreaker returns a breaker whose scope "dep" is open.
func openBreaker(t *testing.T) *breaker.Breaker {
	t.Helper()
	b, err := breaker.New(breaker.Settings{FailureThreshold: 1})
	if err != nil {
		t.Fatalf("breaker.New: %v", err)
	}
	ticket, _, err := b.Allow("dep", time.Now())
	if err != nil {
		t.Fatalf("Allow: %v", err)
	}
	ticket.Done(breaker.Failure, errors.New("down"), time.Now())
	if got := b.StateAt("dep", time.Now()); got != breaker.Open {
		t.Fatalf("breaker state: got %v, want open", got)
	}
	return b
}

// On every path, RoundTrip closes the request body and every copy GetBody
// made, and every response body it discards; the response it returns is
// the only one whose body is left open — readable, whole — for the caller.
// TestCallerRequestUnmodifiedAndBodyClosed covers the request bodies of
// the paths it lists; this adds the response bodies and the paths it
// leaves out.
func TestBodiesClosedOnEveryPath(t *testing.T) {
	dep := func(*http.Request) string { return "dep" }
	tests := []struct {
		name     string
		handler  func(int, http.ResponseWriter, *http.Request)
		tr       func(t *testing.T) *Transport
		key      string
		cancelIn bool // cancel the caller's context during the first wait
		wantErr  error
		status   int  // the response returned, 0 for none
		wantLive bool // the returned response is the base's own, body unread
		wantN    int  // requests seen by the server
	}{
		{name: "success", handler: failThenOK(0), key: "k1", status: 200, wantLive: true, wantN: 1},
		{name: "success with attempt timeout", handler: failThenOK(0), key: "k1", status: 200, wantLive: true, wantN: 1,
			tr: func(*testing.T) *Transport { return &Transport{Retry: RetryPolicy{AttemptTimeout: time.Minute}} }},
		{name: "retry", handler: failThenOK(2), key: "k1", status: 200, wantLive: true, wantN: 3},
		{name: "reconcile", handler: stallUntilGone, key: "k1", wantErr: ErrReconcileRequired, wantN: 1,
			tr: func(*testing.T) *Transport { return &Transport{Retry: RetryPolicy{AttemptTimeout: shortTimeout}} }},
		{name: "brake rule 5: POST without key", handler: failThenOK(1), status: 503, wantLive: true, wantN: 1},
		{name: "brake rule 6: failure threshold", handler: failThenOK(9), key: "k1", status: 503, wantLive: true, wantN: 2,
			tr: func(*testing.T) *Transport {
				return &Transport{Retry: RetryPolicy{MaxAttempts: 5, MaxFailureStreak: 2}}
			}},
		{name: "attempts exhausted", handler: failThenOK(9), key: "k1", status: 503, wantLive: true, wantN: 3},
		{name: "budget refusal", handler: failThenOK(9), key: "k1", status: 503, wantLive: true, wantN: 1,
			tr: func(*testing.T) *Transport { return &Transport{Retry: RetryPolicy{Budget: &refusingBudget{}}} }},
		{name: "Retry-After over the cap", key: "k1", status: 503, wantLive: true, wantN: 1,
			handler: func(_ int, w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Retry-After", "3600")
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, "try later")
			}},
		{name: "cancellation mid-wait", handler: failThenOK(9), key: "k1", cancelIn: true, wantErr: context.Canceled, wantN: 1},
		{name: "panicking hooks", handler: failThenOK(1), key: "k1", status: 200, wantLive: true, wantN: 2,
			tr: func(*testing.T) *Transport { return &Transport{Hooks: panickingHooks()} }},
		// The breaker opened on the first attempt: the retry is refused before
		// the wait, and the live 503 goes back as it is.
		{name: "breaker opens mid-call", handler: failThenOK(9), key: "k1", status: 503, wantLive: true, wantN: 1,
			tr: func(t *testing.T) *Transport {
				b, err := breaker.New(breaker.Settings{FailureThreshold: 1})
				if err != nil {
					t.Fatalf("breaker.New: %v", err)
				}
				return &Transport{Brake: BrakePolicy{Breaker: b}, Scope: ScopePolicy{Of: dep}}
			}},
		{name: "breaker open before the call", handler: failThenOK(0), key: "k1", wantErr: ErrCircuitOpen, wantN: 0,
			tr: func(t *testing.T) *Transport {
				return &Transport{Brake: BrakePolicy{Breaker: openBreaker(t)}, Scope: ScopePolicy{Of: dep}}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newTestServer(t, tt.handler)
			tr := &Transport{}
			if tt.tr != nil {
				tr = tt.tr(t)
			}
			base := &responseBodies{rt: &http.Transport{}}
			tr.Base = base
			clk := newFakeClock()
			newTransport(t, clk, tr)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancelIn {
				clk.onSleep = func(time.Duration) { cancel() }
			}
			req := newRequest(t, ctx, http.MethodPost, srv.URL+"/orders", "")
			bs := &bodies{content: `{"amount":10}`}
			bs.attach(req, true)
			if tt.key != "" {
				req.Header.Set(headerIdempotencyKey, tt.key)
			}

			resp, err := tr.RoundTrip(req)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("RoundTrip: got error %v, want nil", err)
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Fatalf("RoundTrip: got error %v, want one matching %v", err, tt.wantErr)
			case tt.status == 0 && resp != nil:
				t.Fatalf("RoundTrip: got a response %d, want none", resp.StatusCode)
			case tt.status != 0 && (resp == nil || resp.StatusCode != tt.status):
				t.Fatalf("RoundTrip: got %v, want a response %d", resp, tt.status)
			}
			if got := srv.count(); got != tt.wantN {
				t.Errorf("requests seen by the server: got %d, want %d", got, tt.wantN)
			}
			if n, total := bs.unclosed(); n != 0 {
				t.Errorf("request bodies: %d of %d left unclosed, want none", n, total)
			}

			open, total := base.open()
			wantResps := tt.wantN
			if errors.Is(tt.wantErr, ErrReconcileRequired) {
				wantResps = 0 // the one request never got its response
			}
			if total != wantResps {
				t.Errorf("responses from the base: got %d, want %d", total, wantResps)
			}
			for _, b := range open {
				if resp == nil || b.resp != resp {
					t.Errorf("a discarded response body (status %d) was left open", b.resp.StatusCode)
				}
			}
			switch {
			case tt.wantLive && len(open) != 1:
				t.Errorf("open response bodies: got %d, want 1 (the returned response's)", len(open))
			case !tt.wantLive && len(open) != 0:
				t.Errorf("open response bodies: got %d, want none (a set-aside response is read and closed)", len(open))
			}
			if resp == nil {
				return
			}
			body, rerr := io.ReadAll(resp.Body)
			want := map[int]string{200: "done", 503: "try later"}[resp.StatusCode]
			if rerr != nil || string(body) != want {
				t.Errorf("returned body: got %q, %v; want %q", body, rerr, want)
			}
			if err := resp.Body.Close(); err != nil {
				t.Errorf("closing the returned body: %v", err)
			}
			if open, _ := base.open(); len(open) != 0 {
				t.Errorf("after the caller closed the returned body: %d response bodies still open, want none", len(open))
			}
		})
	}
}

// chanBody is a response body fed chunk by chunk; Close unblocks a Read
// in progress, as net/http's response bodies allow.
type chanBody struct {
	data   chan []byte
	closed chan struct{}
	once   sync.Once
}

func (b *chanBody) Read(p []byte) (int, error) {
	select {
	case chunk := <-b.data:
		return copy(p, chunk), nil
	case <-b.closed:
		return 0, errors.New("rv: body closed")
	}
}

func (b *chanBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}

// A caller may close a response body from another goroutine to abort a
// Read in progress (a watchdog, say). The body recorded for the ledger
// must allow it: under -race, this pins Close reading the recorded bytes
// while Read appends to them.
func TestRecordedBodyMayBeClosedDuringARead(t *testing.T) {
	ledger, err := newMemoryLedger(&ledger.Memory{})
	if err != nil {
		t.Fatal(err)
	}
	body := &chanBody{data: make(chan []byte), closed: make(chan struct{})}
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 201, Header: http.Header{}, Body: body, ContentLength: -1, Request: r}, nil
	})
	tr := newTransport(t, newFakeClock(), &Transport{Base: base, Keys: KeyPolicy{Ledger: ledger}})
	req := newRequest(t, testCtx(t), http.MethodPost, "http://rv.invalid/charges", `{"amount":1}`)
	req.Header.Set(headerIdempotencyKey, "rv-key-2")

	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("RoundTrip: %v", err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		_, _ = io.ReadAll(resp.Body)
	}()
	body.data <- []byte("partial")
	_ = resp.Body.Close() // abort the read in progress
	<-read
}
