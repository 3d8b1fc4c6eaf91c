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
		"call 1 attempt 1 Decision      replay_safe (rule 8",
		"call 1 attempt 1 Retry ",
		"call 1 attempt 2 AttemptDone   status=200 outcome=success",
		"=> GET /flaky: 200 OK",
		"call 2 attempt 3 GiveUp        status=503 reason=retryfuse: attempts exhausted",
		"=> GET /down: 503 Service Unavailable",
		"call 3 attempt 1 AttemptDone   status=0 outcome=unknown phase=post_write",
		"call 3 attempt 1 Decision      reconcile_required (rule 3",
		`call 3 attempt 1 Reconcile     key="pay-7" resolution=still_unknown`,
		`=> POST /charges: reconcile required: key="pay-7" attempts=1 phase=post_write`,
		"server: GET /flaky received 2 times, GET /down 3 times, POST /charges applied 1 time(s)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
