package retryfusetest_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/retryfusetest"
)

func postTo(t *testing.T, c *http.Client, url string) error {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/charges", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
	}
	return err
}

func TestServerResetIsATCPReset(t *testing.T) {
	rec := retryfusetest.NewRecorder()
	srv := retryfusetest.NewServer(t, rec.Wrap(nil), retryfusetest.ApplyThenReset())
	if err := postTo(t, srv.Client(), srv.URL); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("POST: got %v, want ECONNRESET", err)
	}
	if rec.Total() != 1 {
		t.Errorf("effects: got %d, want 1", rec.Total())
	}
}

func TestHTTP2ServerResetsTheStreamAsStreamErrorDescribes(t *testing.T) {
	for _, f := range []retryfusetest.Fault{retryfusetest.StreamReset(), retryfusetest.ApplyThenReset(), retryfusetest.ResetBeforeRead()} {
		t.Run(f.String(), func(t *testing.T) {
			rec := retryfusetest.NewRecorder()
			srv := retryfusetest.NewHTTP2Server(t, rec.Wrap(nil), f)
			err := postTo(t, srv.Client(), srv.URL)
			var se retryfusetest.StreamError
			if !errors.As(err, &se) || se.Code != 2 {
				t.Errorf("POST: got %v, want an HTTP/2 stream reset with INTERNAL_ERROR (2)", err)
			}
			if want := map[bool]int{true: 1}[f.Applies()]; rec.Total() != want {
				t.Errorf("effects: got %d, want %d", rec.Total(), want)
			}
		})
	}
}

func TestServerCloseReleasesAStalledRequest(t *testing.T) {
	srv := retryfusetest.NewServer(nil, nil, retryfusetest.StallBeforeApply())
	errc := make(chan error, 1)
	go func() { errc <- postTo(t, srv.Client(), srv.URL) }()
	for deadline := time.Now().Add(5 * time.Second); srv.Requests() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // a bounded wait for the request to reach the socket
	}
	srv.Close()
	if err := <-errc; err == nil {
		t.Errorf("POST: got an answer, want the connection closed by Close")
	}
	srv.Close() // again: nothing happens
}

func TestServerAnswersPastTheScript(t *testing.T) {
	srv := retryfusetest.NewServer(t, nil, retryfusetest.RetryAfter(http.StatusServiceUnavailable, time.Second))
	for _, want := range []int{503, 200} {
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want || (want == 503) != (resp.Header.Get("Retry-After") == "1") {
			t.Errorf("got %d Retry-After %q, want %d", resp.StatusCode, resp.Header.Get("Retry-After"), want)
		}
	}
}
