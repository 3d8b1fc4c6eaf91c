package retryfuse

import (
	"bufio"
	"bytes"
	"errors"
	"net/http"
	"net/textproto"
	"strings"
	"testing"
	"time"
)

// FuzzValidateIdempotencyKey checks, for any string: the validator accepts
// exactly 1 to maxIdempotencyKeyLen bytes of visible ASCII or inner
// spaces; an accepted key, set as a header under any form the transport
// sends, is written by http.Header.Write as exactly one header line that
// reads back, through textproto, as the same key; readKey agrees with the
// validator; a refused key's error wraps ErrInvalidIdempotencyKey and is
// one line.
func FuzzValidateIdempotencyKey(f *testing.F) {
	f.Add("3f2b8c4e-9a1d-4e7f-b6c5-0d8e2a1f7b93")
	f.Add("k\r\nX-Admin: 1")
	f.Add("order 42")
	f.Add(" k")
	f.Add("a\x00b\x7f")
	f.Add(strings.Repeat("a", maxIdempotencyKeyLen+1))
	f.Fuzz(func(t *testing.T, key string) {
		err := validateIdempotencyKey(key)
		if want := validKeyRule(key); (err == nil) != want {
			t.Fatalf("validateIdempotencyKey(%q) = %v; want valid %v", key, err, want)
		}
		k, rerr := readKey(http.Header{headerIdempotencyKey: {key}})
		if err != nil {
			if !errors.Is(err, ErrInvalidIdempotencyKey) {
				t.Fatalf("validateIdempotencyKey(%q) = %v; want an error wrapping ErrInvalidIdempotencyKey", key, err)
			}
			if strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("validateIdempotencyKey(%q): got a message of several lines: %q", key, err)
			}
			if key != "" && !errors.Is(rerr, ErrInvalidIdempotencyKey) {
				t.Fatalf("readKey(%q) = %v; want an error wrapping ErrInvalidIdempotencyKey", key, rerr)
			}
			return
		}
		if rerr != nil || !k.present || k.value != key {
			t.Fatalf("readKey(%q) = %+v, %v; want the key, present", key, k, rerr)
		}
		if len(key) > maxIdempotencyKeyLen {
			t.Fatalf("accepted a key of %d bytes", len(key))
		}
		for i := 0; i < len(key); i++ {
			if c := key[i]; c < 0x20 || c == 0x7f {
				t.Fatalf("accepted %q with control byte %#x", key, c)
			}
		}
		for _, h := range []http.Header{
			{headerIdempotencyKey: {key}},
			hideKey(http.Header{headerIdempotencyKey: {key}}, ""),
			hideKey(http.Header{headerXIdempotencyKey: {key}}, ""),
		} {
			var buf bytes.Buffer
			if err := h.Write(&buf); err != nil {
				t.Fatalf("Header.Write: %v", err)
			}
			if n := strings.Count(buf.String(), "\n"); n != 1 {
				t.Fatalf("Header.Write of key %q: got %d lines %q, want 1", key, n, buf.String())
			}
			buf.WriteString("\r\n")
			mh, err := textproto.NewReader(bufio.NewReader(&buf)).ReadMIMEHeader()
			if err != nil {
				t.Fatalf("reading back %q: %v", buf.String(), err)
			}
			if len(mh) != 1 {
				t.Fatalf("reading back key %q: got fields %v, want one", key, mh)
			}
			for name, vs := range mh {
				if len(vs) != 1 || vs[0] != key || !strings.EqualFold(name, headerIdempotencyKey) && !strings.EqualFold(name, headerXIdempotencyKey) {
					t.Fatalf("reading back key %q: got %s: %q", key, name, vs)
				}
			}
		}
	})
}

// validKeyRule is the documented rule, written independently.
func validKeyRule(key string) bool {
	if key == "" || len(key) > maxIdempotencyKeyLen || strings.HasPrefix(key, " ") || strings.HasSuffix(key, " ") {
		return false
	}
	for _, r := range []byte(key) {
		if r < ' ' || r > '~' {
			return false
		}
	}
	return true
}

// A Retry-After within MaxRetryAfter plus a backoff jitter can exceed what
// a Duration holds when both caps are set near their limits. The wait must
// saturate at MaxRetryAfter, never wrap to a negative delay, which would
// retry at once, earlier than the server asked.
func TestRetryAfterPlusJitterNeverWraps(t *testing.T) {
	const year = 365 * 24 * time.Hour
	srv := newTestServer(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			w.Header().Set("Retry-After", "3153600000") // 100 years
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	clk := newFakeClock()
	var log hookLog
	tr := newTransport(t, clk, &Transport{
		Retry: RetryPolicy{
			MaxRetryAfter:  200 * year,
			InitialBackoff: 200 * year,
			MaxBackoff:     200 * year,
		},
		Hooks: log.hooks(),
	})
	setRandN(tr, func(n int64) int64 { return n - 1 }) // the largest jitter
	resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("Do: got %v, %v; want 200", resp, err)
	}
	if got := clk.Sleeps(); len(got) != 1 || got[0] != 200*year {
		t.Errorf("waits: got %v, want [%v] (the cap)", got, 200*year)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.retries) != 1 || log.retries[0].Delay != 200*year {
		t.Errorf("Retry hook: got %+v, want one retry with Delay %v", log.retries, 200*year)
	}
}
