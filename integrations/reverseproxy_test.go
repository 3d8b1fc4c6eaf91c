package integrations

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// net/http/httputil.ReverseProxy with a retryfuse.Transport.
//
// The recipe: retryfuse as the proxy's Transport; the proxy buffers the
// request body (bounded) and sets GetBody, so that a keyed POST can be
// sent again; a deadline on the outgoing request's context; and an
// ErrorHandler that answers a *retryfuse.ReconcileRequiredError with 504
// (502 when it did not time out), saying that the write may have been
// applied and under which key.
//
// What ReverseProxy does (Go 1.26): the outgoing request is a clone of the
// incoming one, its body the incoming body, which cannot be read twice —
// without buffering, retryfuse does not repeat even a keyed POST. The
// Idempotency-Key header is passed through. A transport error goes to
// ErrorHandler as RoundTrip returned it, unwrapped.

// maxProxyBody bounds the request body the proxy buffers.
const maxProxyBody = 1 << 20

// newProxy returns the recipe's proxy to backend, with timeout as the
// deadline of each outgoing request; buffer false leaves the body
// unbuffered.
func newProxy(t *testing.T, backend string, tr *retryfuse.Transport, timeout time.Duration, buffer bool) http.Handler {
	t.Helper()
	target, err := url.Parse(backend)
	require.NoError(t, err)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.SetXForwarded()
		},
		Transport:    tr,
		ErrorHandler: proxyError,
		ErrorLog:     log.New(io.Discard, "", 0),
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if buffer && r.Body != nil && r.Body != http.NoBody {
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxProxyBody))
			if err != nil {
				http.Error(w, "request body too large or unreadable", http.StatusRequestEntityTooLarge)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
			r.ContentLength = int64(len(body))
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		proxy.ServeHTTP(w, r.WithContext(ctx)) // the clone keeps GetBody
	})
}

// proxyError answers a reconcile error with 504 (or 502) saying what is
// known: the write may have been applied, and its key. Other errors get
// ReverseProxy's usual 502.
func proxyError(w http.ResponseWriter, r *http.Request, err error) {
	var rec *retryfuse.ReconcileRequiredError
	if !errors.As(err, &rec) {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	status := http.StatusBadGateway
	if rec.Timeout() {
		status = http.StatusGatewayTimeout
	}
	if rec.IdempotencyKey != "" {
		w.Header().Set("Idempotency-Key", rec.IdempotencyKey)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, "the upstream did not confirm the outcome: the write may have been applied; look it up by its idempotency key before sending it again\n")
}

// proxyPost posts a keyed order through the proxy with a plain client.
func proxyPost(t *testing.T, proxyURL, key string) (status int, header http.Header, body string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, proxyURL+"/orders", strings.NewReader(`{"sku":"A-1"}`))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", key)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(b)
}

// The recipe: a keyed POST through the proxy, the backend answering 503
// and then 201, is repeated by retryfuse from the buffered body: the
// client sees 201 and the order is applied once. Without the buffering the
// body cannot be replayed, retryfuse does not repeat the POST, and the
// client sees the 503.
func TestReverseProxyKeyedPOSTRepeated(t *testing.T) {
	for _, tc := range []struct {
		name     string
		buffer   bool
		status   int
		requests int
		applied  int
	}{
		{"recipe, body buffered", true, http.StatusCreated, 2, 1},
		{"body not buffered", false, http.StatusServiceUnavailable, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fx effects
			backend := orderServer(t, &fx, order503, orderApply)
			proxy := newServer(t, newProxy(t, backend, fast(t, &retryfuse.Transport{}), 5*time.Second, tc.buffer).ServeHTTP)

			status, _, _ := proxyPost(t, proxy.URL, "order-1")
			assert.Equal(t, tc.status, status)
			assert.Equal(t, tc.requests, fx.Requests(), "requests at the backend")
			assert.Equal(t, tc.applied, fx.Applied(), "orders applied")
			for _, k := range fx.Keys() {
				assert.Equal(t, "order-1", k, "the client's key reaches the backend")
			}
		})
	}
}

// The recipe: the backend applies a keyed POST and stalls past the
// proxy's deadline. retryfuse does not replay it; the ErrorHandler answers
// 504, says the write may have been applied and gives the key: one
// request, one order.
func TestReverseProxyLostResponseMapped(t *testing.T) {
	var fx effects
	backend := orderServer(t, &fx, orderApplyAndStall, orderApply)
	proxy := newServer(t, newProxy(t, backend, fast(t, &retryfuse.Transport{}), deadline, true).ServeHTTP)

	status, header, body := proxyPost(t, proxy.URL, "order-1")
	assert.Equal(t, http.StatusGatewayTimeout, status)
	assert.Equal(t, "order-1", header.Get("Idempotency-Key"))
	assert.Contains(t, body, "may have been applied")
	assert.Equal(t, 1, fx.Requests(), "requests at the backend: no replay")
	assert.Equal(t, 1, fx.Applied(), "orders applied")
}
