package main

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/idempotency"
)

// This file is the callers of a run: the fleet of clients that send the
// keyed writes through the server processes as they are killed, and the
// settling of every key once the killing stops.

// runFleet sends calls keyed writes through url from callers goroutines,
// on one retryfuse Transport told that the servers honour keys, its
// other settings (the retry budget, the throttle of new calls) the
// defaults, and counts how each call ended for its caller.
func runFleet(url string, calls, callers, attempts int) map[string]int {
	client := &http.Client{Transport: &retryfuse.Transport{
		Retry: retryfuse.RetryPolicy{
			MaxAttempts:    attempts,
			AttemptTimeout: 5 * time.Second,
		},
		Keys: retryfuse.KeyPolicy{
			ServerHonours: true,
		},
		Hooks: retryfuse.Hooks{GiveUp: func(i retryfuse.GiveUpInfo) {
			if slot, ok := i.Context.Value(gaveUpKey{}).(*string); ok {
				*slot = retryfuse.ReasonName(i.Reason)
				if errors.Is(i.Reason, retryfuse.ErrReconcileRequired) {
					*slot = "the server's 409 outcome unknown"
				}
			}
		}},
	}}
	defer client.CloseIdleConnections()
	var (
		mu   sync.Mutex
		out  = map[string]int{}
		next = make(chan int)
		wg   sync.WaitGroup
	)
	for range callers {
		wg.Go(func() {
			for i := range next {
				o := call(client, url, i)
				mu.Lock()
				out[o]++
				mu.Unlock()
			}
		})
	}
	for i := range calls {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// call sends keyed write i and names how it ended. A
// *ReconcileRequiredError is named with the reason its Transport gave
// up (Hooks.GiveUp of the same call): "budget" when the retry budget
// refused the retry that would have settled the write.
func call(client *http.Client, url string, i int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var gaveUp string
	ctx = context.WithValue(ctx, gaveUpKey{}, &gaveUp)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/effects", strings.NewReader(`{"n":`+strconv.Itoa(i)+`}`))
	req.Header.Set("Idempotency-Key", keyOf(i))
	resp, err := client.Do(req)
	var rec *retryfuse.ReconcileRequiredError
	switch {
	case errors.As(err, &rec) && rec.Earlier:
		return "reconcile required, earlier call (given up: " + gaveUp + ")"
	case errors.As(err, &rec):
		return "reconcile required (given up: " + gaveUp + ")"
	case err != nil:
		return "error: " + retryfuse.ReasonName(err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.Header.Get(idempotency.HeaderReplayed) == "true" {
		return strconv.Itoa(resp.StatusCode) + " replayed"
	}
	return strconv.Itoa(resp.StatusCode)
}

// settle sends every key once more, straight to a server, until it is
// answered 201 (run now, or replayed) or 409 outcome unknown (the Redis
// ledger's uncertain keys), each for at most wait: a key whose call
// failed for its caller is then applied once, never twice.
func settle(s *servers, calls int, wait time.Duration) map[string]int {
	var (
		mu   sync.Mutex
		out  = map[string]int{}
		next = make(chan int)
		wg   sync.WaitGroup
	)
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	for w := range 8 {
		r := rand.New(rand.NewPCG(3, uint64(w)))
		wg.Go(func() {
			for i := range next {
				got := settleOne(client, s, r, i, wait)
				mu.Lock()
				out[got]++
				mu.Unlock()
			}
		})
	}
	for i := range calls {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

func settleOne(client *http.Client, s *servers, r *rand.Rand, i int, wait time.Duration) string {
	got := "unsettled"
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); {
		req, _ := http.NewRequest(http.MethodPost, "http://"+s.pick(r)+"/effects", strings.NewReader(`{"n":`+strconv.Itoa(i)+`}`))
		req.Header.Set("Idempotency-Key", keyOf(i))
		resp, err := client.Do(req)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusCreated && resp.Header.Get(idempotency.HeaderReplayed) == "true":
			return "replayed"
		case resp.StatusCode == http.StatusCreated:
			return "ran now"
		case resp.StatusCode == http.StatusConflict && strings.Contains(string(b), idempotency.ProblemOutcomeUnknown):
			return "409 outcome unknown"
		case resp.StatusCode == http.StatusConflict && strings.Contains(string(b), idempotency.ProblemNotStored):
			return "409 not stored"
		}
		got = "unsettled (last " + strconv.Itoa(resp.StatusCode) + ")"
		time.Sleep(100 * time.Millisecond) // 409 in flight: a killed server's claim not yet ended
	}
	return got
}
