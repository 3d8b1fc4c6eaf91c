// Command adaptive shows a learnt limit of attempts in flight
// (Load.Adaptive): 40 callers call a dependency that has 2 workers,
// each taking 10ms, for a second. Without a limit, 40 requests would
// queue in front of 2 workers, each waiting 200ms. retryfuse learns how
// many the dependency takes without a queue, and refuses the rest at
// once, before sending, with a *BulkheadFullError that matches
// ErrDeclined: a caller can try elsewhere, or later, instead of waiting.
// While the limit is cold (before it first meets a queue), the first
// burst waits for it (for at most half of each caller's deadline) rather
// than being refused.
//
// The Transport's Policy hook prints each change of the limit, with why.
//
// Run it with:
//
//	go run ./examples/adaptive
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "adaptive:", err)
		os.Exit(1)
	}
}

const (
	workers = 2
	service = 10 * time.Millisecond
	callers = 40
	lasts   = time.Second
)

func run(w io.Writer) error {
	// The dependency: 2 workers behind a FIFO queue.
	work := make(chan struct{}, workers)
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		select {
		case work <- struct{}{}:
		case <-r.Context().Done():
			return
		}
		time.Sleep(service)
		<-work
		fmt.Fprint(rw, "ok")
	}))
	defer srv.Close()

	var mu sync.Mutex
	rt := &retryfuse.Transport{
		Load: retryfuse.LoadPolicy{
			Adaptive: true, // the limit is learnt, per scope, between 2 and 1000
		},
		Retry: retryfuse.RetryPolicy{
			MaxAttempts: 1,
		},
		Hooks: retryfuse.Hooks{
			Policy: func(i retryfuse.PolicyInfo) {
				if i.Policy == "adaptive_limit" {
					mu.Lock()
					fmt.Fprintf(w, "learnt limit: %d -> %d (%s)\n", i.PrevLimit, i.Limit, i.Why)
					mu.Unlock()
				}
			},
		},
	}
	defer rt.CloseIdleConnections()
	client := &http.Client{Transport: rt}

	var answered, refused, failed atomic.Int64
	var slowest atomic.Int64
	var declined atomic.Bool
	var wg sync.WaitGroup
	end := time.Now().Add(lasts)
	for range callers {
		wg.Go(func() {
			for time.Now().Before(end) {
				began := time.Now()
				err := get(client, srv.URL)
				var full *retryfuse.BulkheadFullError
				switch {
				case err == nil:
					answered.Add(1)
					for took := int64(time.Since(began)); ; {
						old := slowest.Load()
						if took <= old || slowest.CompareAndSwap(old, took) {
							break
						}
					}
				case errors.As(err, &full):
					refused.Add(1)
					declined.Store(errors.Is(err, retryfuse.ErrDeclined))
					time.Sleep(5 * time.Millisecond) // refused at once: try again a little later
				default:
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("%d calls failed", n)
	}
	fmt.Fprintf(w, "answered: %d calls; refused before sending: %d (*BulkheadFullError, matches ErrDeclined: %v)\n",
		answered.Load(), refused.Load(), declined.Load())
	if d := time.Duration(slowest.Load()); d < 100*time.Millisecond {
		fmt.Fprintln(w, "slowest answer: under 100ms, where 40 requests queued in front of 2 workers would wait 200ms")
	} else {
		fmt.Fprintf(w, "slowest answer: %v\n", d.Round(time.Millisecond))
	}
	return nil
}

// get makes one call with a deadline of half a second.
func get(client *http.Client, url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = errors.New(resp.Status)
	}
	return err
}
