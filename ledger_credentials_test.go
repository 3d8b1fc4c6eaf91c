package retryfuse

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/retryfuse/retryfuse/internal/share"
	"github.com/retryfuse/retryfuse/ledger"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The client's Ledger never answers one principal with another's response:
// the credentials a request carries are part of its fingerprint.

// postAs sends a keyed POST through c carrying the header fields given
// (name, value, ...), and returns its response, body read, or its error.
func postAs(t *testing.T, c *http.Client, url, key, body string, header ...string) (*http.Response, string, error) {
	t.Helper()
	req := newKeyedPOST(t, callCtx(t), url, key, body)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b), nil
}

// requireCredentialConflict fails the test unless err is the Ledger's
// refusal of a key held for other credentials, before sending.
func requireCredentialConflict(t *testing.T, resp *http.Response, err error) {
	t.Helper()
	require.Nilf(t, resp, "got a response (%v), want a *KeyConflictError", resp)
	var kc *KeyConflictError
	require.Truef(t, errors.As(err, &kc), "got %v, want a *KeyConflictError", err)
	assert.True(t, kc.Credentials, "Credentials: the request's credentials were part of what had to match")
	assert.False(t, kc.ByServer, "ByServer: the Ledger refused it")
	assert.Zero(t, kc.Attempts, "attempts made")
	assert.ErrorIs(t, err, ErrIdempotencyConflict)
	assert.NotErrorIs(t, err, ErrDeclined)
	assert.Contains(t, err.Error(), "other credentials")
}

func TestLedgerNeverAnswersAnotherPrincipalWithTheStoredResponse(t *testing.T) {
	srv := newOrdersServer(t, always(orderApply))
	l, clk := newLedgerOnFakeClock(t, nil)
	// Two processes of one service, sharing one Ledger.
	one, _ := newLedgerClientOn(t, clk, l, nil)
	two, _ := newLedgerClientOn(t, clk, l, nil)

	resp, order, err := postAs(t, one, srv.url(), "order-123-refund", `{"amount":100}`, "Authorization", "Bearer merchant-A")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	for _, c := range []*http.Client{one, two} {
		resp, _, err = postAs(t, c, srv.url(), "order-123-refund", `{"amount":100}`, "Authorization", "Bearer merchant-B")
		requireCredentialConflict(t, resp, err)
		resp, _, err = postAs(t, c, srv.url(), "order-123-refund", `{"amount":100}`)
		requireCredentialConflict(t, resp, err)
	}
	assert.EqualValues(t, 1, srv.posts.Load(), "POSTs that reached the server")

	resp, replayed, err := postAs(t, two, srv.url(), "order-123-refund", `{"amount":100}`, "Authorization", "Bearer merchant-A")
	require.NoError(t, err)
	assert.Equal(t, order, replayed, "A's repeat is answered with A's stored response")
	assert.EqualValues(t, 1, srv.posts.Load(), "POSTs that reached the server")
}

// A platform acting for its merchants under one API key names the header
// that tells them apart.
func TestLedgerBindsEveryNamedHeader(t *testing.T) {
	srv := newOrdersServer(t, always(orderApply))
	l, _ := newLedgerOnFakeClock(t, nil)
	c, _ := newLedgerClient(t, l, func(tr *Transport) {
		tr.Keys.Credentials = Credentials{Headers: []string{"Authorization", "Stripe-Account"}}
	})
	_, _, err := postAs(t, c, srv.url(), "k", "{}", "Authorization", "Bearer platform", "Stripe-Account", "acct_A")
	require.NoError(t, err)
	resp, _, err := postAs(t, c, srv.url(), "k", "{}", "Authorization", "Bearer platform", "Stripe-Account", "acct_B")
	requireCredentialConflict(t, resp, err)
	assert.EqualValues(t, 1, srv.posts.Load(), "POSTs that reached the server")
}

// A token refreshed between a write and its repeat, toward a server that
// does not honour keys: the repeat is refused, never sent a second time.
func TestRotatedTokenIsNotSentAgainTowardAServerWithoutKeys(t *testing.T) {
	srv := newOrdersServer(t, always(orderApply))
	l, _ := newLedgerOnFakeClock(t, nil)
	c, _ := newLedgerClient(t, l, nil)
	_, _, err := postAs(t, c, srv.url(), "k-rot", `{"item":"book"}`, "Authorization", "Bearer old")
	require.NoError(t, err)
	resp, _, err := postAs(t, c, srv.url(), "k-rot", `{"item":"book"}`, "Authorization", "Bearer refreshed")
	requireCredentialConflict(t, resp, err)
	assert.Equal(t, 1, srv.effects("k-rot"), "effects applied under the key")
}

// A's write left uncertain: B under the key is refused as a conflict, not
// told to reconcile A's write, and nothing is sent.
func TestAnotherPrincipalUnderAnUncertainKeyIsAConflict(t *testing.T) {
	srv := newOrdersServer(t, firstThenApply(orderApplyThenStall))
	l, _ := newLedgerOnFakeClock(t, nil)
	c, _ := newLedgerClient(t, l, func(tr *Transport) { tr.Retry.AttemptTimeout = heldAttemptTimeout })
	_, _, err := postAs(t, c, srv.url(), "k-unc", "{}", "Authorization", "Bearer A")
	var rec *ReconcileRequiredError
	require.Truef(t, errors.As(err, &rec), "A: got %v, want a *ReconcileRequiredError", err)
	resp, _, err := postAs(t, c, srv.url(), "k-unc", "{}", "Authorization", "Bearer B")
	requireCredentialConflict(t, resp, err)
	assert.EqualValues(t, 1, srv.posts.Load(), "POSTs that reached the server")
}

func TestLedgerWithoutCredentialsNamedAnswersAnyCaller(t *testing.T) {
	srv := newOrdersServer(t, always(orderApply))
	l, _ := newLedgerOnFakeClock(t, nil)
	c, _ := newLedgerClient(t, l, func(tr *Transport) { tr.Keys.Credentials = Credentials{Headers: []string{}} })
	_, first, err := postAs(t, c, srv.url(), "k", "{}", "Authorization", "Bearer A")
	require.NoError(t, err)
	_, again, err := postAs(t, c, srv.url(), "k", "{}", "Authorization", "Bearer B")
	require.NoError(t, err)
	assert.Equal(t, first, again, "with no credentials named, the stored response answers any caller")
}

// The key of the hash changed: a key stored under the previous one keeps
// its answers while that key is listed.
func TestLedgerPreviousKeysKeepStoredAnswers(t *testing.T) {
	srv := newOrdersServer(t, always(orderApply))
	l, clk := newLedgerOnFakeClock(t, nil)
	old, current := []byte("0123456789abcdef-old"), []byte("0123456789abcdef-new")
	before, _ := newLedgerClientOn(t, clk, l, func(tr *Transport) { tr.Keys.Credentials = Credentials{Key: old} })
	_, first, err := postAs(t, before, srv.url(), "k", "{}", "Authorization", "Bearer A")
	require.NoError(t, err)
	after, _ := newLedgerClientOn(t, clk, l, func(tr *Transport) {
		tr.Keys.Credentials = Credentials{Key: current, PreviousKeys: [][]byte{old}}
	})
	_, again, err := postAs(t, after, srv.url(), "k", "{}", "Authorization", "Bearer A")
	require.NoError(t, err)
	assert.Equal(t, first, again, "A's repeat under the previous key of the hash")
	resp, _, err := postAs(t, after, srv.url(), "k", "{}", "Authorization", "Bearer B")
	requireCredentialConflict(t, resp, err)
	assert.EqualValues(t, 1, srv.posts.Load(), "POSTs that reached the server")
}

func TestLedgerNeverStoresSetCookie(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		http.SetCookie(w, &http.Cookie{Name: "session", Value: "s3cr3t"})
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "created")
	}))
	t.Cleanup(srv.Close)
	l, _ := newLedgerOnFakeClock(t, nil)
	c, _ := newLedgerClient(t, l, nil)
	resp, _, err := postAs(t, c, srv.URL, "k", "{}", "Authorization", "Bearer A")
	require.NoError(t, err)
	assert.NotEmpty(t, resp.Header.Get("Set-Cookie"), "the first response keeps its cookie")
	resp, body, err := postAs(t, c, srv.URL, "k", "{}", "Authorization", "Bearer A")
	require.NoError(t, err)
	assert.Equal(t, "created", body)
	assert.Empty(t, resp.Header.Get("Set-Cookie"), "the replay carries the stored cookie")
	assert.EqualValues(t, 1, posts.Load(), "POSTs that reached the server")
}

func TestCredentialsSettingsAreValidated(t *testing.T) {
	for name, tr := range map[string]*Transport{
		"without a Ledger":     {Keys: KeyPolicy{Credentials: Credentials{Headers: []string{"Authorization"}}}},
		"a bad header name":    {Keys: KeyPolicy{Ledger: &ledger.Memory{}, Credentials: Credentials{Headers: []string{"Stripe Account"}}}},
		"a bad cookie name":    {Keys: KeyPolicy{Ledger: &ledger.Memory{}, Credentials: Credentials{Cookies: []string{"a=b"}}}},
		"a short key":          {Keys: KeyPolicy{Ledger: &ledger.Memory{}, Credentials: Credentials{Key: []byte("short")}}},
		"a short previous key": {Keys: KeyPolicy{Ledger: &ledger.Memory{}, Credentials: Credentials{PreviousKeys: [][]byte{[]byte("x")}}}},
	} {
		err := tr.Validate()
		assert.ErrorIsf(t, err, ErrInvalidPolicy, "%s", name)
		if err != nil {
			assert.Containsf(t, err.Error(), "Keys.Credentials", "%s: the error names the setting", name)
		}
	}
}

// One definition of the credentials a request carries: reads that differ
// in any of them never share a call under the default ShareKey, as calls
// that differ in them never share a key's stored response.
func TestSharedReadsKeepTheLedgersCredentialsApart(t *testing.T) {
	creds := Credentials{Headers: []string{"Authorization", "Stripe-Account"}, Cookies: []string{"sid"}}
	b, err := creds.binding("Keys.Credentials")
	require.NoError(t, err)
	base := func() *http.Request {
		r := httptest.NewRequestWithContext(context.Background(), http.MethodGet, "http://api/v1/balance", nil)
		r.Header.Set("Authorization", "Bearer A")
		r.Header.Set("Stripe-Account", "acct_A")
		r.Header.Set("Cookie", "sid=alice")
		return r
	}
	for _, change := range []struct{ name, value string }{
		{"Authorization", "Bearer B"}, {"Stripe-Account", "acct_B"}, {"Cookie", "sid=mallory"},
	} {
		a, other := base(), base()
		other.Header.Set(change.name, change.value)
		ka, _ := share.KeyOf(nil, a)
		ko, _ := share.KeyOf(nil, other)
		assert.NotEqualf(t, ka, ko, "reads differing in %s share a call", change.name)
		assert.NotEqualf(t, b.Bind([32]byte{}, a.Header, 0), b.Bind([32]byte{}, other.Header, 0), "calls differing in %s share a fingerprint", change.name)
	}
}
