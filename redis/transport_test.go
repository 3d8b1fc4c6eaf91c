package retryfuseredis

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/budget"
)

// These tests run retryfuse Transports — one per replica, each with its
// own Redis client — against real loopback servers.

// evidence records the EvidenceUnavailable events of a Transport.
type evidence struct {
	mu     sync.Mutex
	events []retryfuse.EvidenceUnavailableInfo
}

func (e *evidence) hook(info retryfuse.EvidenceUnavailableInfo) {
	e.mu.Lock()
	e.events = append(e.events, info)
	e.mu.Unlock()
}

// take returns the events so far and forgets them.
func (e *evidence) take() []retryfuse.EvidenceUnavailableInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	ev := e.events
	e.events = nil
	return ev
}

func newTransport(t *testing.T, tr *retryfuse.Transport) *http.Client {
	t.Helper()
	// These tests count what budgets and ledgers let through to servers
	// that fail on purpose: the throttle of new calls, which would refuse a
	// share of them once most had been rejected, is off.
	tr.Load.Throttle.Disable = true
	if tr.Retry.InitialBackoff == 0 {
		tr.Retry.InitialBackoff, tr.Retry.MaxBackoff = time.Millisecond, 2*time.Millisecond
	}
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// unavailableServer answers every request 503 and counts them.
func unavailableServer(t *testing.T, hits *atomic.Int64) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// callAll sends n GETs to url at once, spread over the clients in turn,
// and checks each comes back as a 503 response.
func callAll(t *testing.T, clients []*http.Client, url string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		c := clients[i%len(clients)]
		wg.Go(func() {
			resp, err := c.Get(url)
			if err != nil {
				t.Errorf("GET: %v", err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Errorf("GET: status %d, want 503", resp.StatusCode)
			}
		})
	}
	wg.Wait()
}

// closeBudgets closes f when the test ends.
func closeBudgets(t *testing.T, f *Budgets) {
	t.Cleanup(func() {
		if err := f.Close(bg()); err != nil {
			t.Errorf("Budgets.Close: %v", err)
		}
	})
}

// TestReplicasShareOneBudget: two replicas, one Redis budget per
// dependency. The retries the server sees are bounded by that one budget
// (plus one retry on credit per replica); with a local budget each, the
// same traffic gets twice the reserve. The calls come in rounds, so that
// the leases have time to arrive: a retry never waits for one.
func TestReplicasShareOneBudget(t *testing.T) {
	addr := sharedAddr(t)
	const replicas = 2
	cases := []struct {
		name string
		// newBudget makes the NewBudget of one replica with its own client.
		newBudget func(t *testing.T, prefix string) func(string) (budget.Budget, error)
		// bound is the retries the one shared budget allows for calls.
		bound func(calls int64) int64
	}{
		{
			name: "ratio",
			newBudget: func(t *testing.T, prefix string) func(string) (budget.Budget, error) {
				// calls deposit calls·0.01 retries; the reserve is 1/s · 10s = 10.
				f, err := RatioBudgets(newClient(t, addr), budget.RatioConfig{Ratio: 0.01, MinPerSecond: 1, Window: 10 * time.Second},
					BudgetOptions{Prefix: prefix, Timeout: testTimeout, SyncInterval: 10 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				closeBudgets(t, f)
				return f.New
			},
			bound: func(calls int64) int64 { return calls/100 + 10 },
		},
		{
			name: "token bucket",
			newBudget: func(t *testing.T, prefix string) func(string) (budget.Budget, error) {
				f, err := TokenBuckets(newClient(t, addr), budget.TokenBucketConfig{Capacity: 10, Refill: 1, Interval: time.Hour},
					BudgetOptions{Prefix: prefix, Timeout: testTimeout, SyncInterval: 10 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				closeBudgets(t, f)
				return f.New
			},
			bound: func(int64) int64 { return 10 },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var hits atomic.Int64
			srv := unavailableServer(t, &hits)
			prefix := uniq(t)
			var ev evidence
			clients := make([]*http.Client, replicas)
			for i := range clients {
				clients[i] = newTransport(t, &retryfuse.Transport{Retry: retryfuse.RetryPolicy{MaxAttempts: 4, NewBudget: tc.newBudget(t, prefix)}, Hooks: retryfuse.Hooks{EvidenceUnavailable: ev.hook}})
			}
			var calls int64
			deadline := time.Now().Add(10 * time.Second)
			for hits.Load()-calls < tc.bound(calls) && time.Now().Before(deadline) {
				callAll(t, clients, srv.URL, 20)
				calls += 20
				time.Sleep(20 * time.Millisecond) // two sync intervals, for the leases
			}
			retries, bound := hits.Load()-calls, tc.bound(calls)
			t.Logf("%d calls over %d replicas, up to 3 retries each: the server saw %d retries (shared bound %d, plus one on credit per replica)", calls, replicas, retries, bound)
			if retries > bound+replicas {
				t.Fatalf("retries: got %d, want at most %d, the one shared budget and one on credit per replica", retries, bound+replicas)
			}
			if retries < bound {
				t.Fatalf("retries: got %d, want the shared budget (%d) spent: %d retries were wanted", retries, bound, 3*calls)
			}
			if evs := ev.take(); len(evs) != 0 {
				t.Fatalf("EvidenceUnavailable fired %d times with Redis up: %+v", len(evs), evs[0])
			}
		})
	}

	// The contrast: a local token bucket per replica lets the same traffic
	// through with twice the retries.
	t.Run("local budgets, for contrast", func(t *testing.T) {
		var hits atomic.Int64
		srv := unavailableServer(t, &hits)
		local := func(string) (budget.Budget, error) {
			return budget.NewTokenBucket(budget.TokenBucketConfig{Capacity: 10, Refill: 1, Interval: time.Hour})
		}
		clients := []*http.Client{
			newTransport(t, &retryfuse.Transport{Retry: retryfuse.RetryPolicy{MaxAttempts: 4, NewBudget: local}}),
			newTransport(t, &retryfuse.Transport{Retry: retryfuse.RetryPolicy{MaxAttempts: 4, NewBudget: local}}),
		}
		const calls = 100
		callAll(t, clients, srv.URL, calls)
		if retries := hits.Load() - calls; retries != 20 {
			t.Fatalf("two local buckets of 10: got %d retries, want 20", retries)
		}
	})
}

// chargeServer answers POST /charge 201 "charged", counting the requests;
// while gate is open (not closed), each request waits for it.
type chargeServer struct {
	*httptest.Server
	hits    atomic.Int64
	arrived chan struct{} // receives once per request, when it arrives
	gate    chan struct{}
}

func newChargeServer(t *testing.T, gated bool) *chargeServer {
	s := &chargeServer{arrived: make(chan struct{}, 100), gate: make(chan struct{})}
	if !gated {
		close(s.gate)
	}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		s.hits.Add(1)
		s.arrived <- struct{}{}
		<-s.gate
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charged")
	}))
	t.Cleanup(s.Close)
	return s
}

func post(c *http.Client, url, key, body string) (status int, respBody string, err error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body) // to the end: the ledger stores the result then
	return resp.StatusCode, string(b), err
}

func ledgerReplica(t *testing.T, addr, prefix string) *http.Client {
	t.Helper()
	l, err := NewLedger(newClient(t, addr), LedgerConfig{Prefix: prefix, Timeout: testTimeout, AllowWithoutPersistence: true})
	if err != nil {
		t.Fatal(err)
	}
	closeLedger(t, l)
	return newTransport(t, &retryfuse.Transport{Keys: retryfuse.KeyPolicy{Ledger: l}})
}

// TestReplicasShareOneLedger: the same keyed POST sent through two
// replicas reaches the server once; the other is braked while the first is
// in flight, and gets the stored result once it has completed.
func TestReplicasShareOneLedger(t *testing.T) {
	addr := sharedAddr(t)
	prefix := uniq(t)
	a, b := ledgerReplica(t, addr, prefix), ledgerReplica(t, addr, prefix)

	t.Run("braked, then replayed", func(t *testing.T) {
		srv := newChargeServer(t, true)
		type result struct {
			status int
			body   string
			err    error
		}
		first := make(chan result, 1)
		go func() {
			s, body, err := post(a, srv.URL+"/charge", "order-1", "amount=10")
			first <- result{s, body, err}
		}()
		<-srv.arrived // replica a's request is at the server, in flight

		if _, _, err := post(b, srv.URL+"/charge", "order-1", "amount=10"); !errors.Is(err, retryfuse.ErrDuplicateInFlight) {
			t.Fatalf("duplicate on replica b while in flight: got %v, want ErrDuplicateInFlight", err)
		}
		close(srv.gate)
		if r := <-first; r.err != nil || r.status != http.StatusCreated || r.body != "charged" {
			t.Fatalf("replica a: got %d %q %v, want 201 \"charged\"", r.status, r.body, r.err)
		}
		status, body, err := post(b, srv.URL+"/charge", "order-1", "amount=10")
		if err != nil || status != http.StatusCreated || body != "charged" {
			t.Fatalf("replica b after completion: got %d %q %v, want the stored 201 \"charged\"", status, body, err)
		}
		if n := srv.hits.Load(); n != 1 {
			t.Fatalf("server saw the charge %d times, want 1", n)
		}
	})

	t.Run("at once", func(t *testing.T) {
		srv := newChargeServer(t, false)
		const keys = 20
		var braked, replayed int64
		for i := range keys {
			key := "order-at-once-" + string(rune('a'+i))
			start := make(chan struct{})
			var wg sync.WaitGroup
			var sent, brakedNow atomic.Int64
			for _, c := range []*http.Client{a, b} {
				wg.Go(func() {
					<-start
					status, body, err := post(c, srv.URL+"/charge", key, "amount=10")
					switch {
					case errors.Is(err, retryfuse.ErrDuplicateInFlight):
						brakedNow.Add(1)
					case err == nil && status == http.StatusCreated && body == "charged":
						sent.Add(1) // sent, or replayed: told apart by the server's count
					default:
						t.Errorf("key %s: got %d %q %v", key, status, body, err)
					}
				})
			}
			close(start)
			wg.Wait()
			if sent.Load()+brakedNow.Load() != 2 || sent.Load() < 1 {
				t.Fatalf("key %s: %d answered 201, %d braked; want one 201 and one braked or replayed", key, sent.Load(), brakedNow.Load())
			}
			braked += brakedNow.Load()
			replayed += sent.Load() - 1
		}
		t.Logf("%d keys sent through both replicas at once: %d duplicates braked, %d replayed from the stored result", keys, braked, replayed)
		if n := srv.hits.Load(); n != keys {
			t.Fatalf("%d keys, each sent through both replicas at once: the server saw %d requests, want %d (one per key)", keys, n, keys)
		}
	})
}

// waitExists waits (at most 5s) until key is in Redis: a sync has put it
// there.
func waitExists(t *testing.T, c *redis.Client, key string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.Exists(bg(), key).Val() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("key %s not in Redis after 5s: the shared budget is not used", key)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
