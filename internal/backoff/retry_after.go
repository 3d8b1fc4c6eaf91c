package backoff

import (
	"net/http"
	"time"
)

// maxRetryAfterSeconds bounds the delay-seconds form before it is turned
// into a Duration, so that no value can overflow time.Duration (which holds
// about 292 years).
const maxRetryAfterSeconds = 100 * 365 * 24 * 3600

// parseRetryAfter parses a Retry-After header value (RFC 9110 §10.2.3) as
// a delay from now: either delay-seconds (a non-negative decimal integer) or
// an HTTP-date in any of the three formats net/http accepts. ok is false for
// an absent, malformed or negative value; a date in the past gives 0 and ok.
// The result is never negative and never overflows: values beyond a hundred
// years are clamped to a hundred years, far above any cap.
func parseRetryAfter(value string, now time.Time) (d time.Duration, ok bool) {
	if value == "" {
		return 0, false
	}
	if secs, isNum, valid := parseDelaySeconds(value); isNum {
		if !valid {
			return 0, false
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(value)
	if err != nil {
		return 0, false
	}
	if !t.After(now) {
		return 0, true
	}
	d = t.Sub(now) // saturates at the maximum Duration; clamp below
	if d > maxRetryAfterSeconds*time.Second {
		d = maxRetryAfterSeconds * time.Second
	}
	return d, true
}

// parseDelaySeconds reads s as delay-seconds. isNum reports whether s looks
// like a number at all (digits, optionally signed); valid reports whether it
// is delay-seconds: digits only, no sign. Surrounding spaces are tolerated.
func parseDelaySeconds(s string) (secs int64, isNum, valid bool) {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	if s == "" {
		return 0, false, false
	}
	if s[0] == '-' || s[0] == '+' {
		return 0, true, false // delay-seconds is digits only (RFC 9110 §10.2.3)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false, false
		}
		if secs < maxRetryAfterSeconds {
			secs = secs*10 + int64(c-'0')
		}
	}
	if secs > maxRetryAfterSeconds {
		secs = maxRetryAfterSeconds
	}
	return secs, true, true
}

// RetryAfterDelay is the wait before a retry the server asked to delay by
// ra, given a jitter drawn from the backoff and the cap limit (ra at most
// limit): never earlier than asked, the jitter above it spreading clients
// that were given the same value, never past the cap. The sum saturates at
// limit rather than wrapping to a negative wait.
func RetryAfterDelay(ra, jitter, limit time.Duration) time.Duration {
	if jitter > limit-ra {
		return limit
	}
	return ra + jitter
}

// RetryAfter returns the server's Retry-After of resp, if present and valid.
func RetryAfter(resp *http.Response, now time.Time) (time.Duration, bool) {
	if resp == nil {
		return 0, false
	}
	v := resp.Header["Retry-After"]
	if len(v) == 0 {
		return 0, false
	}
	return parseRetryAfter(v[0], now)
}
