package fingerprint

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/retryfuse/retryfuse/internal/sentinel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fpBodyPrefix separates body-only fingerprints from request fingerprints.
const fpBodyPrefix = "retryfuse fingerprint v1 body\x00"

// fingerprintBody, for the tests of hashBody, returns the SHA-256 fingerprint of the bytes getBody
// returns, reading at most limit bytes, and closes the reader on every path.
// Pass Request.GetBody, so that the request's own body is never consumed.
//
// A body longer than limit gives an error wrapping sentinel.ErrFingerprintLimit; an
// error from getBody or from reading is returned wrapped. A nil getBody is
// an error wrapping sentinel.ErrNotRepeatable: a body that cannot be read again
// cannot be fingerprinted. For a request without a body use
// Request, or pass a getBody that returns http.NoBody. A negative
// limit is an error wrapping sentinel.ErrInvalidPolicy.
func fingerprintBody(getBody func() (io.ReadCloser, error), limit int64) ([32]byte, error) {
	h := Get()
	defer Put(h)
	io.WriteString(h, fpBodyPrefix)
	if err := hashBody(h, getBody, limit); err != nil {
		return [32]byte{}, err
	}
	return h.Sum(), nil
}

// trackedBody is a body that records whether it was closed.
type trackedBody struct {
	io.Reader
	closed bool
}

func (b *trackedBody) Close() error { b.closed = true; return nil }

func bodyOf(s string) func() (io.ReadCloser, error) {
	return func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(s)), nil }
}

func mustFingerprintBody(t *testing.T, s string) [32]byte {
	t.Helper()
	fp, err := fingerprintBody(bodyOf(s), 1<<20)
	require.NoError(t, err)
	return fp
}

func TestFingerprintBodyFormat(t *testing.T) {
	// Pins the format: a change here changes every stored fingerprint.
	want := sha256.Sum256([]byte("retryfuse fingerprint v1 body\x00" + `{"amount":100}`))
	got := mustFingerprintBody(t, `{"amount":100}`)
	assert.Equal(t, want, got)
}

func TestFingerprintBodySameAndDifferent(t *testing.T) {
	a := mustFingerprintBody(t, `{"amount":100}`)
	assert.Equal(t, a, mustFingerprintBody(t, `{"amount":100}`), "same bytes, different fingerprints")
	for _, other := range []string{`{"amount":101}`, `{"amount":100} `, ``} {
		assert.NotEqual(t, a, mustFingerprintBody(t, other), "body %q has the fingerprint of another", other)
	}
}

func TestFingerprintBodyLimit(t *testing.T) {
	tests := []struct {
		body    string
		limit   int64
		wantErr error
	}{
		{"", 0, nil},
		{"x", 0, sentinel.ErrFingerprintLimit},
		{"12345678", 8, nil},
		{"123456789", 8, sentinel.ErrFingerprintLimit},
		{strings.Repeat("x", 1<<16), 1 << 16, nil},
		{strings.Repeat("x", 1<<16+1), 1 << 16, sentinel.ErrFingerprintLimit},
		{"12345678", math.MaxInt64, nil},
		{"x", -1, sentinel.ErrInvalidPolicy},
	}
	for _, tt := range tests {
		body := &trackedBody{Reader: strings.NewReader(tt.body)}
		_, err := fingerprintBody(func() (io.ReadCloser, error) { return body, nil }, tt.limit)
		if tt.wantErr == nil {
			assert.NoError(t, err, "%d bytes, limit %d", len(tt.body), tt.limit)
		} else {
			assert.ErrorIs(t, err, tt.wantErr, "%d bytes, limit %d: got %v, want %v", len(tt.body), tt.limit, err, tt.wantErr)
		}
		if tt.limit >= 0 {
			assert.True(t, body.closed, "%d bytes, limit %d: body not closed", len(tt.body), tt.limit)
		}
	}
}

func TestFingerprintBodyErrors(t *testing.T) {
	errGet := errors.New("get body failed")
	_, err := fingerprintBody(func() (io.ReadCloser, error) { return nil, errGet }, 10)
	assert.ErrorIs(t, err, errGet, "getBody's error")

	errRead := errors.New("read failed")
	body := &trackedBody{Reader: failingReader{errRead}}
	_, err = fingerprintBody(func() (io.ReadCloser, error) { return body, nil }, 10)
	assert.ErrorIs(t, err, errRead, "the reader's error")
	assert.True(t, body.closed, "body not closed after a read error")

	_, err = fingerprintBody(nil, 10)
	assert.ErrorIs(t, err, sentinel.ErrNotRepeatable, "nil getBody")

	fp, err := fingerprintBody(func() (io.ReadCloser, error) { return nil, nil }, 10)
	require.NoError(t, err)
	assert.Equal(t, mustFingerprintBody(t, ""), fp, "a nil reader is an empty body")
}

func mustFingerprintRequest(t *testing.T, method, url, body string) [32]byte {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	require.NoError(t, err)
	fp, err := Request(req, 1<<20)
	require.NoError(t, err)
	return fp
}

func TestFingerprintRequest(t *testing.T) {
	base := mustFingerprintRequest(t, "POST", "https://api.example/v1/charges", `{"amount":100}`)
	same := []struct{ name, method, url, body string }{
		{"another host", "POST", "https://replica.example/v1/charges", `{"amount":100}`},
		{"user info", "POST", "https://u:p@api.example/v1/charges", `{"amount":100}`},
	}
	for _, tt := range same {
		assert.Equal(t, base, mustFingerprintRequest(t, tt.method, tt.url, tt.body), "%s changed the fingerprint", tt.name)
	}
	different := []struct{ name, method, url, body string }{
		{"method", "PUT", "https://api.example/v1/charges", `{"amount":100}`},
		{"path", "POST", "https://api.example/v1/refunds", `{"amount":100}`},
		{"escaped path", "POST", "https://api.example/v1%2Fcharges", `{"amount":100}`},
		// POST /transfer?to=bob under the key of ?to=alice must never be
		// answered with alice's stored result.
		{"query", "POST", "https://api.example/v1/charges?to=bob", `{"amount":100}`},
		{"body", "POST", "https://api.example/v1/charges", `{"amount":101}`},
		{"no body", "POST", "https://api.example/v1/charges", ``},
	}
	for _, tt := range different {
		assert.NotEqual(t, base, mustFingerprintRequest(t, tt.method, tt.url, tt.body), "a different %s kept the fingerprint", tt.name)
	}
	assert.NotEqual(t, mustFingerprintRequest(t, "POST", "https://api.example/v1/transfers?to=alice", `{}`),
		mustFingerprintRequest(t, "POST", "https://api.example/v1/transfers?to=bob", `{}`), "another query kept the fingerprint")
	assert.Equal(t, mustFingerprintRequest(t, "GET", "https://api.example", ""),
		mustFingerprintRequest(t, "GET", "https://api.example/", ""), "an empty path is /")
	assert.NotEqual(t, mustFingerprintBody(t, `{"amount":100}`), base, "a request fingerprint equals a body fingerprint")
}

func TestFingerprintRequestLeavesBodyUnread(t *testing.T) {
	req, err := http.NewRequest("POST", "https://api.example/v1/charges", bytes.NewReader([]byte("payload")))
	require.NoError(t, err)
	_, err = Request(req, 100)
	require.NoError(t, err)
	got, err := io.ReadAll(req.Body)
	require.NoError(t, err)
	assert.Equal(t, "payload", string(got), "Request consumed req.Body")
}

func TestFingerprintRequestBodies(t *testing.T) {
	empty := mustFingerprintRequest(t, "POST", "https://api.example/", "")
	req, err := http.NewRequest("POST", "https://api.example/", http.NoBody)
	require.NoError(t, err)
	fp, err := Request(req, 0)
	require.NoError(t, err)
	assert.Equal(t, empty, fp, "http.NoBody and a nil body differ")

	// A body that cannot be read again cannot be fingerprinted; it is left unread.
	body := &trackedBody{Reader: strings.NewReader("once")}
	req, err = http.NewRequest("POST", "https://api.example/", body)
	require.NoError(t, err)
	require.Nil(t, req.GetBody)
	_, err = Request(req, 100)
	assert.ErrorIs(t, err, sentinel.ErrNotRepeatable)
	rest, _ := io.ReadAll(body)
	assert.Equal(t, "once", string(rest), "the body was read")
	assert.False(t, body.closed, "the body was closed")

	req, err = http.NewRequest("POST", "https://api.example/", strings.NewReader("too long"))
	require.NoError(t, err)
	_, err = Request(req, 3)
	assert.ErrorIs(t, err, sentinel.ErrFingerprintLimit)
}

// TestFingerprintRequestFormat pins the value of a request's fingerprint:
// a fleet's ledger keeps it, so a change would make a request sent before
// an upgrade conflict with its own repeat sent after.
func TestFingerprintRequestFormat(t *testing.T) {
	for _, tt := range []struct{ method, url, path, query, body string }{
		{"POST", "https://api.example/v1/charges", "/v1/charges", "", `{"amount":100}`},
		{"POST", "https://api.example/v1/transfers?to=alice&x=1", "/v1/transfers", "to=alice&x=1", `{"amount":100}`},
		{"PUT", "https://api.example", "/", "", ""},
		{"PATCH", "https://api.example/a%2Fb/" + strings.Repeat("p", 20<<10), "/a%2Fb/" + strings.Repeat("p", 20<<10), "", strings.Repeat("b", 40<<10)},
	} {
		// A request without a query keeps the form from before the query
		// was included; one with a query has a prefix of its own.
		want := sha256.Sum256([]byte("retryfuse fingerprint v1 request\x00" + field(tt.method) + field(tt.path) + tt.body))
		if tt.query != "" {
			want = sha256.Sum256([]byte("retryfuse fingerprint v1 request with query\x00" + field(tt.method) + field(tt.path) + field(tt.query) + tt.body))
		}
		// A *bytes.Reader is hashed where it lies, a *strings.Reader and a
		// reader of another kind through the copy buffer: alike.
		for _, body := range []io.Reader{strings.NewReader(tt.body), bytes.NewReader([]byte(tt.body)), io.MultiReader(strings.NewReader(tt.body))} {
			req, err := http.NewRequest(tt.method, tt.url, body)
			require.NoError(t, err)
			if req.GetBody == nil {
				req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(io.MultiReader(strings.NewReader(tt.body))), nil }
			}
			got, err := Request(req, 1<<20)
			if err != nil || got != want {
				t.Errorf("fingerprint of %s %s, body a %T: got %x, %v; want %x", tt.method, tt.path, body, got, err, want)
			}
		}
	}
}

// The fingerprint's limit holds alike for a body hashed where it lies and
// one copied.
func TestFingerprintLimitInMemoryAndCopied(t *testing.T) {
	for _, tt := range []struct {
		body    string
		limit   int64
		wantErr error
	}{
		{"", 0, nil},
		{"x", 0, sentinel.ErrFingerprintLimit},
		{"12345678", 8, nil},
		{"123456789", 8, sentinel.ErrFingerprintLimit},
	} {
		for _, getBody := range []func() (io.ReadCloser, error){
			func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader([]byte(tt.body))), nil },
			func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(tt.body)), nil },
		} {
			req, err := http.NewRequest(http.MethodPost, "https://api.example/", http.NoBody)
			require.NoError(t, err)
			req.Body, _ = getBody()
			req.GetBody = getBody
			_, err = Request(req, tt.limit)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Errorf("body %q, limit %d, a %T: got error %v, want %v", tt.body, tt.limit, req.Body, err, tt.wantErr)
			}
		}
	}
}

func BenchmarkFingerprintBody1KiB(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 1024)
	getBody := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := fingerprintBody(getBody, 1<<20); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFingerprintBody16KiB is the fingerprint of a keyed POST's
// 16 KiB body, read through GetBody as http.NewRequest makes it.
func BenchmarkFingerprintBody16KiB(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 16<<10)
	getBody := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := fingerprintBody(getBody, 1<<20); err != nil {
			b.Fatal(err)
		}
	}
}
