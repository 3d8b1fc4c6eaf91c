package retryfuse

import (
	"bufio"
	"bytes"
	"errors"
	"math"
	"math/big"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"testing"
	"time"
)

// century is the longest delay parseRetryAfter returns.
const century = maxRetryAfterSeconds * time.Second

// FuzzParseRetryAfter checks, for any value and any now: the delay is never
// negative nor above a hundred years; ok is true only for delay-seconds
// (digits, surrounding blanks allowed) or an HTTP-date net/http parses, and
// the delay is zero when ok is false; delay-seconds gives exactly that many
// seconds (clamped to the century); a date gives the time until it (zero
// once past); and the wait built from it (retryAfterDelay) stays within
// [Retry-After, cap] — min(ra+jitter, cap), never negative, never wrapped.
func FuzzParseRetryAfter(f *testing.F) {
	now := time.Date(2025, 3, 14, 12, 0, 0, 0, time.UTC).Unix()
	f.Add("120", now, int64(0), uint32(5), int64(time.Second), int64(30*time.Second))
	f.Add("Fri, 14 Mar 2025 12:01:30 GMT", now, int64(0), uint32(0), int64(0), int64(time.Minute))
	f.Add("99999999999999999999", int64(0), int64(0), uint32(math.MaxUint32), int64(math.MaxInt64), int64(math.MaxInt64))
	f.Add("-5", now, int64(999999999), uint32(1), int64(-1), int64(-1))
	f.Add("+5", now, int64(0), uint32(7), int64(1), int64(time.Hour))
	f.Fuzz(func(t *testing.T, value string, sec, nsec int64, small uint32, jitter, limit int64) {
		now := time.Unix(sec, nsec)
		d, ok := parseRetryAfter(value, now)
		d2, ok2 := parseRetryAfter(value, now)
		if d != d2 || ok != ok2 {
			t.Fatalf("parseRetryAfter(%q) gave %v, %v then %v, %v", value, d, ok, d2, ok2)
		}
		if d < 0 || d > century {
			t.Fatalf("parseRetryAfter(%q, %v) = %v, want within [0, %v]", value, now, d, century)
		}
		if !ok && d != 0 {
			t.Fatalf("parseRetryAfter(%q) = %v, false; want 0 with ok false", value, d)
		}

		trimmed := strings.Trim(value, " \t")
		date, dateErr := http.ParseTime(value)
		switch {
		case allDigits(trimmed):
			if !ok {
				t.Fatalf("parseRetryAfter(%q): got ok false for delay-seconds", value)
			}
			want := century
			if n, err := strconv.ParseInt(trimmed, 10, 64); err == nil && n <= maxRetryAfterSeconds {
				want = time.Duration(n) * time.Second
			}
			if d != want {
				t.Fatalf("parseRetryAfter(%q) = %v, want %v", value, d, want)
			}
		case dateErr == nil:
			if !ok {
				t.Fatalf("parseRetryAfter(%q): got ok false for an HTTP-date", value)
			}
			if (d > 0) != date.After(now) {
				t.Fatalf("parseRetryAfter(%q, %v) = %v; want a positive delay exactly when the date is ahead", value, now, d)
			}
			if d > 0 && d < century && !now.Add(d).Equal(date) {
				t.Fatalf("parseRetryAfter(%q, %v) = %v, which does not lead to %v", value, now, d, date)
			}
		case ok:
			t.Fatalf("parseRetryAfter(%q) = %v, true; want ok false: neither delay-seconds nor an HTTP-date", value, d)
		}

		// Delay-seconds round-trips up to the century, and is clamped there.
		s := strconv.FormatUint(uint64(small), 10)
		wantSmall := min(time.Duration(small)*time.Second, century)
		if got, ok := parseRetryAfter(s, now); !ok || got != wantSmall {
			t.Fatalf("parseRetryAfter(%q) = %v, %v; want %v, true", s, got, ok, wantSmall)
		}

		// The capped wait: the transport only waits for a Retry-After
		// within its cap (both non-negative), with a non-negative jitter.
		jitter, limit = abs64(jitter), abs64(limit)
		for _, ra := range []time.Duration{d, wantSmall} {
			lim := time.Duration(limit)
			if ra > lim {
				lim = ra
			}
			got := retryAfterDelay(ra, time.Duration(jitter), lim)
			sum := new(big.Int).Add(big.NewInt(int64(ra)), big.NewInt(jitter))
			want := lim
			if sum.Cmp(big.NewInt(int64(lim))) < 0 {
				want = time.Duration(sum.Int64())
			}
			if got != want || got < ra || got > lim {
				t.Fatalf("retryAfterDelay(%v, %v, %v) = %v, want min(ra+jitter, cap) = %v", ra, time.Duration(jitter), lim, got, want)
			}
		}
	})
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// abs64 maps v onto [0, MaxInt64].
func abs64(v int64) int64 {
	if v == math.MinInt64 {
		return math.MaxInt64
	}
	if v < 0 {
		return -v
	}
	return v
}

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
