package retryfusetest_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/retryfuse/retryfuse/retryfusetest"
)

// statusCodes are the plain statuses a proxy or a server in trouble sends.
var statusCodes = []int{http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusInternalServerError, http.StatusTooManyRequests}

// checkPlainStatus checks that resp is code with an empty body and no
// Retry-After, and that the handler behind rec did not run.
func checkPlainStatus(t *testing.T, resp *http.Response, code int, rec *retryfusetest.Recorder) {
	t.Helper()
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != code || err != nil || len(body) != 0 {
		t.Errorf("got %d %q (%v), want %d with an empty body", resp.StatusCode, body, err, code)
	}
	if ra, ok := resp.Header["Retry-After"]; ok {
		t.Errorf("Retry-After: got %q, want none", ra)
	}
	if rec.Total() != 0 {
		t.Errorf("effects: got %d, want none (the handler must not run)", rec.Total())
	}
}

func TestStatusIsNamedByItsCodeAndAppliesNothing(t *testing.T) {
	f := retryfusetest.Status(503)
	if f.String() != "Status(503)" {
		t.Errorf("String: got %q, want Status(503)", f.String())
	}
	if f.Applies() {
		t.Errorf("Applies: got true, want false (the handler does not run)")
	}
}

func TestTransportStatusAnswersTheCodeWithoutTheHandler(t *testing.T) {
	for _, code := range statusCodes {
		rec := retryfusetest.NewRecorder()
		rt := retryfusetest.NewTransport(rec.Wrap(answerOK()), retryfusetest.Status(code))
		resp, err := rt.RoundTrip(httpGetReq(t, "http://api.test"))
		if err != nil {
			t.Fatalf("%d: %v", code, err)
		}
		checkPlainStatus(t, resp, code, rec)
	}
}

func TestServerStatusAnswersTheCodeWithoutTheHandlerOnHTTP1AndHTTP2(t *testing.T) {
	for _, start := range []struct {
		name string
		new  func(testing.TB, http.Handler, ...retryfusetest.Fault) *retryfusetest.Server
	}{{"HTTP/1.1", retryfusetest.NewServer}, {"HTTP/2.0", retryfusetest.NewHTTP2Server}} {
		t.Run(start.name, func(t *testing.T) {
			for _, code := range statusCodes {
				rec := retryfusetest.NewRecorder()
				srv := start.new(t, rec.Wrap(answerOK()), retryfusetest.Status(code))
				resp, err := srv.Client().Do(httpGetReq(t, srv.URL))
				if err != nil {
					t.Fatalf("%d: %v", code, err)
				}
				if resp.Proto != start.name {
					t.Errorf("proto: got %s, want %s", resp.Proto, start.name)
				}
				checkPlainStatus(t, resp, code, rec)
			}
		})
	}
}

func TestHandlerStatusAnswersTheCodeWithoutTheHandler(t *testing.T) {
	for _, code := range statusCodes {
		rec := retryfusetest.NewRecorder()
		h := retryfusetest.NewHandler(rec.Wrap(answerOK()), retryfusetest.Status(code))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/charges", nil))
		checkPlainStatus(t, w.Result(), code, rec)
	}
}

func TestStatusWithAnImpossibleCodeFailsWithAnErrorNamingIt(t *testing.T) {
	for _, code := range []int{-1, 0, 99, 1000} {
		f := retryfusetest.Status(code)
		rt := retryfusetest.NewTransport(nil, f)
		resp, err := rt.RoundTrip(httpGetReq(t, "http://api.test"))
		if err == nil || !strings.Contains(err.Error(), f.String()) || !strings.Contains(err.Error(), "not an HTTP status") {
			t.Errorf("Transport, %v: got %v, %v; want an error naming the status", f, resp, err)
		}

		srv := retryfusetest.NewServer(t, nil, f)
		resp, err = srv.Client().Do(httpGetReq(t, srv.URL))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), f.String()) {
			t.Errorf("Server, %v: got %d %q, want 500 naming the status", f, resp.StatusCode, body)
		}

		w := httptest.NewRecorder()
		retryfusetest.NewHandler(nil, f).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), f.String()) {
			t.Errorf("Handler, %v: got %d %q, want 500 naming the status", f, w.Code, w.Body.String())
		}
	}
}

func httpGetReq(t *testing.T, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/charges", nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}
