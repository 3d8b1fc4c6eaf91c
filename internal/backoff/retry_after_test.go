package backoff

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 3, 14, 12, 0, 0, 0, time.UTC) // Fri, 14 Mar 2025 12:00:00 GMT
	const century = maxRetryAfterSeconds * time.Second
	tests := []struct {
		value  string
		want   time.Duration
		wantOK bool
	}{
		{"", 0, false},
		{"0", 0, true},
		{"5", 5 * time.Second, true},
		{"120", 120 * time.Second, true},
		{" 7\t", 7 * time.Second, true},
		{"-5", 0, false},
		{"+5", 0, false}, // delay-seconds is digits only
		{"-0", 0, false},
		{"-", 0, false},
		{"+5", 0, false},
		{"1.5", 0, false},
		{"5s", 0, false},
		{"soon", 0, false},
		{"99999999999999999999999999", century, true},
		{strconv.FormatInt(maxRetryAfterSeconds+1, 10), century, true},
		// The three HTTP-date formats, 90 seconds ahead.
		{"Fri, 14 Mar 2025 12:01:30 GMT", 90 * time.Second, true},  // IMF-fixdate
		{"Friday, 14-Mar-25 12:01:30 GMT", 90 * time.Second, true}, // RFC 850
		{"Fri Mar 14 12:01:30 2025", 90 * time.Second, true},       // asctime
		// A date in the past, or now, means no wait.
		{"Fri, 14 Mar 2025 11:59:00 GMT", 0, true},
		{"Fri, 14 Mar 2025 12:00:00 GMT", 0, true},
		// Far future dates are clamped, never overflow.
		{"Fri, 31 Dec 9999 23:59:59 GMT", century, true},
		{"Fri, 14 Mar 2025 25:00:00 GMT", 0, false},
		{"14 Mar 2025 12:01:30", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseRetryAfter(tt.value, now)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", tt.value, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestParseRetryAfterNeverNegative(t *testing.T) {
	nows := []time.Time{
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Now(),
		time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
	}
	values := []string{"0", "1", "86400", "9223372036854775807", "18446744073709551616",
		"Fri, 31 Dec 9999 23:59:59 GMT", "Mon, 01 Jan 0001 00:00:00 GMT", "Thu, 01 Jan 1970 00:00:00 GMT"}
	for _, now := range nows {
		for _, v := range values {
			d, ok := parseRetryAfter(v, now)
			if !ok {
				t.Errorf("parseRetryAfter(%q, %v): got ok false, want true", v, now)
			}
			if d < 0 || d > maxRetryAfterSeconds*time.Second {
				t.Errorf("parseRetryAfter(%q, %v) = %v, want within [0, 100 years]", v, now, d)
			}
		}
	}
}

func TestRetryAfterReadsTheResponseHeader(t *testing.T) {
	now := time.Now()
	if _, ok := RetryAfter(nil, now); ok {
		t.Error("RetryAfter(nil): got ok true, want false")
	}
	resp := &http.Response{Header: http.Header{}}
	if _, ok := RetryAfter(resp, now); ok {
		t.Error("RetryAfter without the header: got ok true, want false")
	}
	resp.Header.Set("Retry-After", "3")
	if d, ok := RetryAfter(resp, now); d != 3*time.Second || !ok {
		t.Errorf("RetryAfter with Retry-After: 3 = %v, %v; want 3s, true", d, ok)
	}
}
