package retryfuse

import (
	"net/http"
	"strings"
	"sync"
	"testing"
)

// panicReports collects the Policy events that report a panic.
type panicReports struct {
	mu  sync.Mutex
	all []PolicyInfo
}

func (r *panicReports) hook(i PolicyInfo) {
	if i.Policy == policyHook {
		r.mu.Lock()
		r.all = append(r.all, i)
		r.mu.Unlock()
	}
}

// A panicking hook or Classifier never breaks a call, and is not
// swallowed without a trace: its first panic is reported through
// Hooks.Policy, once per Transport, naming what panicked.
func TestAPanickingHookOrClassifierIsReportedOnce(t *testing.T) {
	for _, tt := range []struct {
		name string
		set  func(*Transport)
	}{
		{"Hooks.AttemptDone", func(tr *Transport) { tr.Hooks.AttemptDone = func(AttemptDoneInfo) { panic("boom") } }},
		{"Hooks.Retry", func(tr *Transport) { tr.Hooks.Retry = func(RetryInfo) { panic("boom") } }},
		{"Retry.Classifier", func(tr *Transport) {
			tr.Retry.Classifier = func(*http.Response, error) Class { panic("boom") }
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			base := newLoadBase()
			base.status.Store(http.StatusServiceUnavailable)
			var reports panicReports
			tr := &Transport{Base: base, Hooks: Hooks{Policy: reports.hook}}
			tt.set(tr)
			tr = newTransport(t, newFakeClock(), tr)
			for i := range 3 {
				resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
				if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
					t.Fatalf("call %d: got %v, %v; want the 503 back: a panic never breaks a call", i, resp, err)
				}
			}
			if len(reports.all) != 1 {
				t.Fatalf("reports: got %d (%+v), want 1", len(reports.all), reports.all)
			}
			r := reports.all[0]
			if r.Action != actionPanicked || r.Err == nil || !strings.Contains(r.Err.Error(), tt.name) || !strings.Contains(r.Err.Error(), "boom") || r.CallID == 0 {
				t.Errorf("report: %+v, want action panicked, an error naming %s and the value, and the call's ID", r, tt.name)
			}
		})
	}
}

// A hook among several joined by JoinHooks that panics is reported as
// one on its own is: the others still run, the call goes on, and the
// first panic reaches Hooks.Policy, once.
func TestAPanickingJoinedHookIsReportedOnce(t *testing.T) {
	base := newLoadBase()
	base.status.Store(http.StatusServiceUnavailable)
	var (
		reports panicReports
		mu      sync.Mutex
		after   int // the AttemptDone joined after the panicking one
	)
	tr := newTransport(t, newFakeClock(), &Transport{Base: base, Hooks: JoinHooks(
		Hooks{AttemptDone: func(AttemptDoneInfo) { panic("boom") }},
		Hooks{AttemptDone: func(AttemptDoneInfo) { mu.Lock(); after++; mu.Unlock() }, Policy: reports.hook},
	)})
	for i := range 3 {
		resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("call %d: got %v, %v; want the 503 back: a panic never breaks a call", i, resp, err)
		}
	}
	if after == 0 {
		t.Error("the hook joined after the panicking one never ran")
	}
	if len(reports.all) != 1 {
		t.Fatalf("reports: got %d (%+v), want 1", len(reports.all), reports.all)
	}
	if r := reports.all[0]; r.Err == nil || !strings.Contains(r.Err.Error(), "Hooks.AttemptDone") || !strings.Contains(r.Err.Error(), "boom") {
		t.Errorf("report: %+v, want an error naming Hooks.AttemptDone and the value", r)
	}
}
