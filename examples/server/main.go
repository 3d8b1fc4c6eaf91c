// Command server shows the server half of Idempotency-Key: a handler
// behind package idempotency's middleware, called through retryfuse.
//
// The program serves a small charges API on a loopback port: POST
// /charges applies a charge (it counts them) and answers 201. The
// middleware in front of it runs each key's request once and answers a
// repeat with the stored response; a duplicate sent while the first runs
// gets 409, the key reused with another body 422, a POST without a key
// 400, each as problem details (RFC 9457). Run it with:
//
//	go run ./examples/server
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/idempotency"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

// charges is the API: it applies every POST /charges it is given. hold,
// when not nil, is waited on before answering (to show a duplicate
// arriving while a charge is being applied); entered is told each time a
// charge starts.
type charges struct {
	applied atomic.Int64
	mu      sync.Mutex
	hold    chan struct{}
	entered chan struct{}
}

func (c *charges) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	n := c.applied.Add(1)
	c.mu.Lock()
	hold, entered := c.hold, c.entered
	c.mu.Unlock()
	if entered != nil {
		entered <- struct{}{}
	}
	if hold != nil {
		<-hold
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":"ch_%d","request":%s}`, n, body)
}

// holdNext makes the next charge wait until release is called.
func (c *charges) holdNext() (entered <-chan struct{}, release func()) {
	hold, in := make(chan struct{}), make(chan struct{}, 1)
	c.mu.Lock()
	c.hold, c.entered = hold, in
	c.mu.Unlock()
	return in, func() {
		c.mu.Lock()
		c.hold, c.entered = nil, nil
		c.mu.Unlock()
		close(hold)
	}
}

func run(w io.Writer) error {
	api := &charges{}
	h, err := idempotency.New(api, idempotency.Config{}) // a ledger.Memory of its own: one server
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-served
	}()
	url := "http://" + ln.Addr().String() + "/charges"

	rt := &retryfuse.Transport{}
	defer rt.CloseIdleConnections()
	client := &http.Client{Transport: rt, Timeout: 5 * time.Second}
	post := func(key, body string) (*http.Response, string, error) {
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(body)))
		if err != nil {
			return nil, "", err
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, string(b), err
	}
	show := func(what string, resp *http.Response, body string) {
		fmt.Fprintf(w, "%s\n  %d", what, resp.StatusCode)
		if resp.Header.Get(idempotency.HeaderReplayed) == "true" {
			fmt.Fprintf(w, " (%s: true)", idempotency.HeaderReplayed)
		}
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			fmt.Fprintf(w, " (Retry-After: %s)", ra)
		}
		var p struct{ Type, Title string }
		if resp.Header.Get("Content-Type") == "application/problem+json" && json.Unmarshal([]byte(body), &p) == nil {
			fmt.Fprintf(w, " %s\n  type %s\n", p.Title, p.Type)
		} else {
			fmt.Fprintf(w, " %s\n", body)
		}
		fmt.Fprintf(w, "  charges applied so far: %d\n", api.applied.Load())
	}

	const charge = `{"amount":4200,"currency":"EUR"}`
	resp, body, err := post("order-42", charge)
	if err != nil {
		return err
	}
	show(`POST /charges, Idempotency-Key: order-42`, resp, body)
	fmt.Fprintf(w, "  %s: %s\n", idempotency.HeaderHonoured, resp.Header.Get(idempotency.HeaderHonoured))

	resp, body, err = post("order-42", charge)
	if err != nil {
		return err
	}
	show("the same POST again, same key and body", resp, body)

	// The middleware answers 422; retryfuse's Transport, seeing it comes
	// from a server that honours keys, returns it as the conflict error.
	_, _, err = post("order-42", `{"amount":1,"currency":"EUR"}`)
	if !errors.Is(err, retryfuse.ErrIdempotencyConflict) {
		return fmt.Errorf("the same key, another body: got %v, want ErrIdempotencyConflict", err)
	}
	fmt.Fprintf(w, "the same key, another body\n  refused: errors.Is(err, retryfuse.ErrIdempotencyConflict)\n  charges applied so far: %d\n", api.applied.Load())

	resp, body, err = post("", charge)
	if err != nil {
		return err
	}
	show("a POST without a key", resp, body)

	// A duplicate sent while the first request under its key is running:
	// the middleware answers 409 with Retry-After, and retryfuse's
	// Transport waits and sends it again; by then the first has ended (it
	// is let go when the 409 arrives), and the duplicate gets its stored
	// response.
	entered, release := api.holdNext()
	var once sync.Once
	var conflicts atomic.Int32
	rt.Hooks.AttemptDone = func(i retryfuse.AttemptDoneInfo) {
		if i.StatusCode == http.StatusConflict {
			conflicts.Add(1)
			once.Do(release)
		}
	}
	first := make(chan error, 1)
	go func() {
		_, _, err := post("order-43", charge)
		first <- err
	}()
	<-entered
	resp, body, err = post("order-43", charge)
	once.Do(release)
	if err := errors.Join(err, <-first); err != nil {
		return err
	}
	fmt.Fprintf(w, "Idempotency-Key: order-43 again while its first request runs\n  409 from the middleware, %d time(s); retryfuse waited its Retry-After and sent it again\n", conflicts.Load())
	show(" then", resp, body)

	if got := api.applied.Load(); got != 2 {
		return fmt.Errorf("%d charges applied, want 2 (order-42 and order-43, once each)", got)
	}
	return nil
}
