package retryfuse

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/internal/fingerprint"
	"github.com/retryfuse/retryfuse/internal/stored"
	"github.com/retryfuse/retryfuse/ledger"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// completeRecorder is a ledger.Ledger that records what Complete was given.
type completeRecorder struct {
	*ledger.Memory
	got chan *ledger.StoredResponse
}

func (r completeRecorder) Complete(ctx context.Context, key, token string, res *ledger.StoredResponse) error {
	r.got <- res
	return r.Memory.Complete(ctx, key, token, res)
}

// The Transport hands a ledger no result whose headers are over the
// bounds, whatever the ledger would do with it: the key is completed
// without a result, and a later call under it is told to reconcile.
func TestResultWithLargeHeadersIsNotStored(t *testing.T) {
	srv := newTestServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Big", strings.Repeat("a", stored.MaxHeaderBytes))
		w.WriteHeader(http.StatusCreated)
	})
	rec := completeRecorder{&ledger.Memory{}, make(chan *ledger.StoredResponse, 1)}
	client, _ := newLedgerClient(t, rec, nil)
	resp, _, err := postKeyed(t, client, srv.URL, "big-1", "order")
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	select {
	case res := <-rec.got:
		assert.Nil(t, res, "got a stored result, want none: its headers are over the bound")
	case <-time.After(callWait):
		t.Fatal("Complete was not called")
	}
	_, _, err = postKeyed(t, client, srv.URL, "big-1", "order")
	assert.ErrorIs(t, err, ErrAlreadyApplied)
	assert.Equal(t, 1, srv.count(), "the completed key is not sent again")
}

// A 307 or 308 of a keyed POST is not its completion: http.Client sends
// the same key and body to the new location, which the ledger lets through
// and completes under the fingerprint of the path first sent to, so that a
// later call under the key is answered from the ledger.
func TestRedirectedKeyedPOSTUnderALedger(t *testing.T) {
	for _, status := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			var effects atomic.Int32
			srv := newTestServer(t, func(_ int, w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/charges" {
					w.Header().Set("Location", "/v2/charges")
					w.WriteHeader(status)
					return
				}
				effects.Add(1)
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, "ch_1")
			})
			client, _ := newLedgerClient(t, &ledger.Memory{}, nil)
			for call := 1; call <= 2; call++ {
				resp, body, err := postKeyed(t, client, srv.URL+"/charges", "charge-1", `{"amount":100}`)
				require.NoErrorf(t, err, "call %d", call)
				assert.Equalf(t, http.StatusCreated, resp.StatusCode, "call %d: got %d, want 201", call, resp.StatusCode)
				assert.Equalf(t, "ch_1", body, "call %d", call)
			}
			assert.Equal(t, int32(1), effects.Load(), "the charge is applied once")
			assert.Equal(t, 2, srv.count(), "the second call is answered from the ledger: nothing sent")
		})
	}
}

// A 303 after a keyed POST is followed by a GET of the result with the
// same headers: another operation, which the ledger lets through.
func TestSeeOtherAfterAKeyedPOSTUnderALedger(t *testing.T) {
	srv := newTestServer(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			w.Header().Set("Location", "/charges/ch_1")
			w.WriteHeader(http.StatusSeeOther)
			return
		}
		_, _ = io.WriteString(w, "ch_1")
	})
	client, _ := newLedgerClient(t, &ledger.Memory{}, nil)
	resp, body, err := postKeyed(t, client, srv.URL+"/charges", "charge-2", `{"amount":100}`)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "ch_1", body)
}

// The Transport hands its ledger.Memory the result it records, which the
// ledger keeps without a copy: what the caller does with its response
// afterwards never reaches the stored result, whether the body's length
// was known (recorded into a buffer of that size) or not.
func TestStoredResultUntouchedByTheCallersResponse(t *testing.T) {
	for _, known := range []bool{true, false} {
		t.Run("known length "+strconv.FormatBool(known), func(t *testing.T) {
			const want = `{"order":"o-1","status":"created"}`
			ledger, _ := newLedgerOnFakeClock(t, &ledger.Memory{})
			sent := 0
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				sent++
				_ = r.Body.Close()
				n := int64(-1)
				if known {
					n = int64(len(want))
				}
				return &http.Response{StatusCode: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}},
					Body: io.NopCloser(bytes.NewReader([]byte(want))), ContentLength: n, Request: r}, nil
			})
			client, _ := newLedgerClient(t, ledger, func(tr *Transport) { tr.Base = base })
			first, err := client.Do(newKeyedPOST(t, callCtx(t), "http://orders.invalid/orders", "k-1", `{"item":"book"}`))
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(first.Body)
			if err != nil || string(got) != want {
				t.Fatalf("first body: got %q, %v; want %q", got, err, want)
			}
			_ = first.Body.Close()
			first.Header.Set("Content-Type", "text/plain")
			first.Header["Content-Type"][0] = "changed"
			first.Header.Add("X-Extra", "1")

			resp, body, err := postKeyed(t, client, "http://orders.invalid/orders", "k-1", `{"item":"book"}`)
			if err != nil {
				t.Fatalf("replay: got error %v, want the stored result", err)
			}
			if sent != 1 {
				t.Errorf("requests sent: got %d, want 1", sent)
			}
			if body != want || resp.StatusCode != http.StatusCreated {
				t.Errorf("replay: got %d %q, want 201 %q", resp.StatusCode, body, want)
			}
			if h := resp.Header; len(h) != 1 || h.Get("Content-Type") != "application/json" {
				t.Errorf("replay header: got %v, want only Content-Type: application/json", h)
			}
		})
	}
}

// unrecordingLedger is a Ledger whose Complete and Uncertain never reach
// it: a shared store that cannot be reached while a result is recorded.
type unrecordingLedger struct{ ledger.Ledger }

var errStoreUnreachable = errors.New("store unreachable")

func (unrecordingLedger) Complete(context.Context, string, string, *ledger.StoredResponse) error {
	return errStoreUnreachable
}

func (unrecordingLedger) Uncertain(context.Context, string, string) error {
	return errStoreUnreachable
}

// An applied write whose result could not be recorded leaves its claim to
// expire: uncertain then, never free, so that a redelivery after
// InFlightTTL is not sent and applied a second time.
func TestUnrecordedResultNeverFreesTheKey(t *testing.T) {
	const key = "order-unrecorded"
	l, clock := newTestLedger(t, 0)
	client, _ := newLedgerClientOn(t, clock, unrecordingLedger{l}, nil)
	srv := newOrdersServer(t, firstThenApply(orderApply))

	resp, _, err := postKeyed(t, client, srv.url(), key, `{"item":"book"}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	_, _, err = postKeyed(t, client, srv.url(), key, `{"item":"book"}`)
	assert.ErrorIsf(t, err, ErrDuplicateInFlight, "while the claim lasts: got %v, want ErrDuplicateInFlight", err)
	for _, advance := range []time.Duration{testLedgerInFlightTTL, testLedgerTTL - time.Nanosecond} {
		clock.Advance(advance)
		_, _, err = postKeyed(t, client, srv.url(), key, `{"item":"book"}`)
		rec := reconcileErrOf(t, err, key)
		assert.Truef(t, rec.Earlier, "%v later: got %v, want a refusal because of the earlier call", advance, rec)
	}
	assert.Equalf(t, 1, srv.effects(key), "got %d effects, want 1: the write must not be applied twice", srv.effects(key))

	clock.Advance(time.Nanosecond) // TTL after the claim's expiry: free
	resp, _, err = postKeyed(t, client, srv.url(), key, `{"item":"book"}`)
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
}

// A negative setting of a ledger.Memory is refused, by Begin and by a
// Transport's Validate, naming it.
func TestMemoryLedgerInvalidSettings(t *testing.T) {
	tests := []struct {
		field string
		cfg   *ledger.Memory
	}{
		{"MaxEntries", &ledger.Memory{MaxEntries: -1}},
		{"TTL", &ledger.Memory{TTL: -time.Second}},
		{"InFlightTTL", &ledger.Memory{InFlightTTL: -time.Second}},
		{"MaxStoredBody", &ledger.Memory{MaxStoredBody: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			_, err := tt.cfg.Begin(context.Background(), "k", ledger.Fingerprint{1})
			require.ErrorIs(t, err, ErrInvalidPolicy)
			assert.Contains(t, err.Error(), "Memory."+tt.field+" ")
			err = (&Transport{Keys: KeyPolicy{Ledger: tt.cfg}}).Validate()
			require.ErrorIs(t, err, ErrInvalidPolicy)
			assert.Contains(t, err.Error(), "Memory."+tt.field+" ")
		})
	}
}

// A request without a URL is an error of the caller's, as net/http's
// Transport reports it; with a Ledger, fingerprinting such a keyed request
// dereferenced the nil URL and panicked.
func TestNilURLWithLedgerIsAnErrorNotAPanic(t *testing.T) {
	ledger, err := newMemoryLedger(&ledger.Memory{})
	if err != nil {
		t.Fatal(err)
	}
	sent := false
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent = true
		return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
	})
	tr := newTransport(t, newFakeClock(), &Transport{Base: base, Keys: KeyPolicy{Ledger: ledger}})
	req := &http.Request{Method: http.MethodPost, Header: http.Header{headerIdempotencyKey: {"rv-key"}}}
	req = req.WithContext(testCtx(t))

	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("RoundTrip panicked: %v", p)
		}
	}()
	if _, err := fingerprint.Request(req, 1<<10); err == nil {
		t.Error("fingerprint.Request of a request without a URL: got nil error, want one")
	}
	resp, err := tr.RoundTrip(req)
	if err == nil {
		_ = resp.Body.Close()
		t.Errorf("RoundTrip: got %v, nil; want an error", resp)
	}
	if sent {
		t.Error("the request without a URL reached the base")
	}
}

// A key claimed in the ledger must be settled on every path out of
// RoundTrip, a panic of the base included. Left in flight, the key was
// freed when its claim expired, and a later call under it sent the write
// again although the panicking attempt may have been applied.
func TestBasePanicLeavesTheKeyUncertainNotInFlight(t *testing.T) {
	clk := newFakeClock()
	ledger, err := newMemoryLedger(&ledger.Memory{InFlightTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	base := &panicBase{}
	tr := newTransport(t, clk, &Transport{Base: base, Keys: KeyPolicy{Ledger: ledger}, Retry: RetryPolicy{Budget: budget.Unlimited()}})
	const url = "http://rv-ledger.invalid/charges"
	post := func() *http.Request {
		req := newRequest(t, testCtx(t), http.MethodPost, url, `{"amount":1}`)
		req.Header.Set(headerIdempotencyKey, "rv-key-1")
		return req
	}

	if !roundTripPanics(tr, post()) {
		t.Fatal("the base's panic did not reach the caller")
	}
	if got := base.seen.Load(); got != 1 {
		t.Fatalf("requests the base received: got %d, want 1", got)
	}

	base.status.Store(201)
	for _, after := range []time.Duration{0, 2 * time.Minute} { // before and after the in-flight claim would expire
		_ = clk.Sleep(testCtx(t), after)
		resp, err := tr.RoundTrip(post())
		if err == nil {
			_ = resp.Body.Close()
		}
		var rec *ReconcileRequiredError
		if !errors.As(err, &rec) || !rec.Earlier {
			t.Errorf("a later call under the key, %v on: got %v, %v; want a *ReconcileRequiredError for the earlier call", after, resp, err)
		}
	}
	if got := base.seen.Load(); got != 1 {
		t.Errorf("requests the base received: got %d, want 1 (the possibly applied write never sent again)", got)
	}
}
