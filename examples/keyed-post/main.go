// Command keyed-post shows when retryfuse repeats a POST.
//
// A POST that carries an Idempotency-Key header and an in-memory body
// (bytes.Reader, bytes.Buffer or strings.Reader, for which
// http.NewRequest sets GetBody) is repeated after a 503: the server
// receives the same body and the same key on each attempt. The same POST
// without a key is not repeated: the server sees it once, and the caller
// gets the 503 back as a response, with a nil error.
//
// The server answers 503 the first time it sees a key (or no key) and 201
// after that, and records what it received.
//
// Run it with:
//
//	go run ./examples/keyed-post
package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/retryfuse/retryfuse"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "keyed-post:", err)
		os.Exit(1)
	}
}

// server answers 503 to the first request under each idempotency key
// ("" for none) and 201 to the later ones, and keeps the bodies it got.
type server struct {
	mu     sync.Mutex
	bodies map[string][]string
}

func (s *server) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	s.bodies[key] = append(s.bodies[key], string(body))
	first := len(s.bodies[key]) == 1
	s.mu.Unlock()
	if first {
		rw.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	rw.WriteHeader(http.StatusCreated)
}

// received returns the bodies received under key.
func (s *server) received(key string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.bodies[key])
}

func run(w io.Writer) error {
	s := &server{bodies: map[string][]string{}}
	srv := httptest.NewServer(s)
	defer srv.Close()

	rt := &retryfuse.Transport{
		Retry: retryfuse.RetryPolicy{
			InitialBackoff: 10 * time.Millisecond, // short, so the example runs at once
		},
		Hooks: retryfuse.Hooks{
			Retry: func(i retryfuse.RetryInfo) {
				fmt.Fprintf(w, "  transport: attempt %d: %v; repeating with key %q\n", i.Attempt, i.Err, i.IdempotencyKey)
			},
			GiveUp: func(i retryfuse.GiveUpInfo) {
				fmt.Fprintf(w, "  transport: gave up after attempt %d (status %d): %v\n", i.Attempt, i.StatusCode, i.Reason)
			},
		},
	}
	defer rt.CloseIdleConnections()
	client := &http.Client{Transport: rt}

	body := []byte(`{"amount":4200,"currency":"EUR"}`)
	post := func(key string) (int, error) {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/charges", bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		return resp.StatusCode, nil
	}
	report := func(key string, status int) []string {
		got := s.received(key)
		for i, b := range got {
			fmt.Fprintf(w, "  server: request %d: key %q, body %s\n", i+1, key, b)
		}
		fmt.Fprintf(w, "  client: status %d; the server received %d request(s)\n", status, len(got))
		return got
	}

	fmt.Fprintln(w, `POST /charges with "Idempotency-Key: order-42"`)
	status, err := post("order-42")
	if err != nil {
		return err
	}
	got := report("order-42", status)
	if status != http.StatusCreated || !slices.Equal(got, []string{string(body), string(body)}) {
		return fmt.Errorf("keyed POST: got %d with bodies %q, want 201 after the same body twice", status, got)
	}

	fmt.Fprintln(w, "POST /charges without a key")
	status, err = post("")
	if err != nil {
		return err
	}
	if got := report("", status); status != http.StatusServiceUnavailable || len(got) != 1 {
		return fmt.Errorf("POST without a key: got %d after %d requests, want 503 after 1", status, len(got))
	}
	return nil
}
