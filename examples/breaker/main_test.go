package main

import (
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"call 3: 503 Service Unavailable (server has received 3 requests)\n  breaker http://127.0.0.1:",
		": closed -> open (cause: retryfuse: retryable status 503 Service Unavailable)",
		"call 4: not sent: circuit open for http://127.0.0.1:",
		"probe allowed 100ms after opening, cause: retryfuse: retryable status 503",
		": half_open -> open (cause:",
		"call 6: not sent: circuit open",
		": half_open -> closed\n",
		"call 8: 200 OK (server has received 6 requests)",
		"client made 8 calls, 2 failed fast; the server received 6 requests",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
