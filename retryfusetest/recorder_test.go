package retryfusetest_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/retryfuse/retryfuse/retryfusetest"
)

// spy is a testing.TB that keeps the errors reported on it.
type spy struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (s *spy) Helper() {}
func (s *spy) Errorf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, fmt.Sprintf(format, args...))
}

func apply(t *testing.T, h http.Handler, key, body string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://api.test/", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := retryfusetest.NewTransport(h).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
}

func TestRecorderAssertionsReportEveryBrokenKey(t *testing.T) {
	rec := retryfusetest.NewRecorder()
	h := rec.Wrap(nil)
	apply(t, h, "a", "1")
	apply(t, h, "a", "2")
	apply(t, h, "b", "3")
	apply(t, h, "", "4")
	apply(t, h, "", "5")

	s := &spy{TB: t}
	rec.AtMostOnce(s) // "a" twice; unkeyed requests are not checked
	rec.ExactlyOnce(s, "a")
	rec.ExactlyOnce(s, "b")
	rec.ExactlyOnce(s, "c")
	rec.NotApplied(s, "b")
	rec.NotApplied(s, "c")
	want := []string{
		`idempotency key "a": applied 2 times, want at most once`,
		`idempotency key "a": applied 2 times, want exactly once`,
		`idempotency key "c": applied 0 times, want exactly once`,
		`idempotency key "b": applied 1 times, want never`,
	}
	if strings.Join(s.errs, "\n") != strings.Join(want, "\n") {
		t.Errorf("reported:\n%s\nwant:\n%s", strings.Join(s.errs, "\n"), strings.Join(want, "\n"))
	}
	if got := rec.Bodies("a"); len(got) != 2 || got[0] != "1" || got[1] != "2" {
		t.Errorf("Bodies(a): got %q, want [1 2]", got)
	}
	if got := rec.Keys(); strings.Join(got, ",") != "a,b," {
		t.Errorf("Keys: got %q, want a, b and the unkeyed", got)
	}
	if rec.Total() != 5 || rec.Applied("") != 2 {
		t.Errorf("Total, Applied(\"\"): got %d, %d; want 5, 2", rec.Total(), rec.Applied(""))
	}
}

func TestRecorderGivesTheHandlerTheWholeBody(t *testing.T) {
	var rec retryfusetest.Recorder // the zero value is ready
	var got string
	h := rec.Wrap(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 64)
		n, _ := r.Body.Read(buf)
		got = string(buf[:n])
	}))
	apply(t, h, "k", "the body")
	if got != "the body" || rec.Bodies("k")[0] != "the body" {
		t.Errorf("handler read %q, recorder kept %q; want the body in both", got, rec.Bodies("k"))
	}
}

func TestRecorderReadsTheKeyWhateverItsHeaderForm(t *testing.T) {
	rec := retryfusetest.NewRecorder()
	h := rec.Wrap(nil)
	for _, name := range []string{"idempotency-key", "X-Idempotency-Key"} {
		req, _ := http.NewRequest(http.MethodPost, "http://api.test/", strings.NewReader("x"))
		req.Header[name] = []string{"k-" + name}
		resp, err := retryfusetest.NewTransport(h).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	rec.ExactlyOnce(t, "k-idempotency-key") // a lower-case map key reaches the server canonical, as on the wire
	rec.ExactlyOnce(t, "k-X-Idempotency-Key")
}
