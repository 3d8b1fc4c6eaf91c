package backoff

import (
	"math"
	"math/big"
	"net/http"
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
// once past); and the wait built from it (RetryAfterDelay) stays within
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
			got := RetryAfterDelay(ra, time.Duration(jitter), lim)
			sum := new(big.Int).Add(big.NewInt(int64(ra)), big.NewInt(jitter))
			want := lim
			if sum.Cmp(big.NewInt(int64(lim))) < 0 {
				want = time.Duration(sum.Int64())
			}
			if got != want || got < ra || got > lim {
				t.Fatalf("RetryAfterDelay(%v, %v, %v) = %v, want min(ra+jitter, cap) = %v", ra, time.Duration(jitter), lim, got, want)
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
