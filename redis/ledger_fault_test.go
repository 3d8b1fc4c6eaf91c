package retryfuseredis

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse"
)

// These tests send keyed writes through Transports that share a Redis
// ledger, as replicas do, while Redis is paused, killed and restarted, and
// count at the server how often each write was applied: never twice,
// including redeliveries after InFlightTTL, and nothing left blocked by a
// claim whose request was never sent.

// applyServer applies each keyed POST once per arrival and counts the
// applications by Idempotency-Key.
type applyServer struct {
	*httptest.Server
	mu      sync.Mutex
	applied map[string]int
}

func newApplyServer(t *testing.T) *applyServer {
	s := &applyServer{applied: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(time.Millisecond) // the write is in flight a while
		key := r.Header.Get("Idempotency-Key")
		s.mu.Lock()
		s.applied[key]++
		s.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "applied "+key)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *applyServer) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied[key]
}

// outcomes counts how keyed calls ended.
type outcomes struct {
	ok, duplicate, reconcile, unavailable, other atomic.Int64
}

func (o *outcomes) add(status int, err error) {
	var rre *retryfuse.ReconcileRequiredError
	switch {
	case err == nil && status == http.StatusCreated:
		o.ok.Add(1)
	case errors.Is(err, retryfuse.ErrDuplicateInFlight):
		o.duplicate.Add(1)
	case errors.As(err, &rre):
		o.reconcile.Add(1)
	case errors.Is(err, retryfuse.ErrLedgerUnavailable):
		o.unavailable.Add(1)
	default:
		o.other.Add(1)
	}
}

func (o *outcomes) String() string {
	return fmt.Sprintf("201 %d, duplicate in flight %d, reconcile %d, ledger unavailable %d, other %d",
		o.ok.Load(), o.duplicate.Load(), o.reconcile.Load(), o.unavailable.Load(), o.other.Load())
}

// faultFleet is replicas: each a Transport with a Ledger and a Redis
// client of its own, one Redis between them.
type faultFleet struct {
	ledgers []*Ledger
	clients []*http.Client
	lost    []atomic.Int64 // OnDataLost reports, per replica
}

const (
	faultInFlightTTL = 500 * time.Millisecond
	faultReplicas    = 3
)

func newFaultFleet(t *testing.T, addr string) *faultFleet {
	t.Helper()
	f := &faultFleet{lost: make([]atomic.Int64, faultReplicas)}
	prefix := uniq(t)
	for i := range faultReplicas {
		c := newClient(t, addr)
		if err := c.Ping(bg()).Err(); err != nil {
			t.Fatal(err)
		}
		l, err := NewLedger(c, LedgerConfig{
			Prefix:                  prefix,
			TTL:                     time.Minute, // and so the quarantine
			InFlightTTL:             faultInFlightTTL,
			Timeout:                 100 * time.Millisecond,
			AllowWithoutPersistence: true, // the pause case; the AOF case checks it
			OnDataLost:              func(error) { f.lost[i].Add(1) },
		})
		if err != nil {
			t.Fatal(err)
		}
		closeLedger(t, l)
		f.ledgers = append(f.ledgers, l)
		f.clients = append(f.clients, newTransport(t, &retryfuse.Transport{Keys: retryfuse.KeyPolicy{Ledger: l}}))
	}
	return f
}

// drained waits (at most 15s) until no replica has a step waiting to be
// recorded.
func (f *faultFleet) drained(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for _, l := range f.ledgers {
		for len(l.pending.snapshot()) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("steps still queued 15s after the faults: %d", len(l.pending.snapshot()))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// keyLog is every key sent so far.
type keyLog struct {
	mu   sync.Mutex
	keys []string
}

func (k *keyLog) add(key string) {
	k.mu.Lock()
	k.keys = append(k.keys, key)
	k.mu.Unlock()
}

func (k *keyLog) pick(rng *rand.Rand) (string, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.keys) == 0 {
		return "", false
	}
	return k.keys[rng.IntN(len(k.keys))], true
}

func (k *keyLog) all() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.keys...)
}

// load sends keyed writes from 8 goroutines through random replicas until
// stop is closed: mostly new keys, and 30% of the time a key sent before
// (a client re-sending, a queue redelivering).
func (f *faultFleet) load(url string, keys *keyLog, o *outcomes, stop <-chan struct{}) (wait func()) {
	var wg sync.WaitGroup
	for g := range 8 {
		rng := rand.New(rand.NewPCG(uint64(g), 1))
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				key, ok := keys.pick(rng)
				if !ok || rng.IntN(10) >= 3 {
					key = fmt.Sprintf("order-%d-%d", g, n)
					keys.add(key)
				}
				status, _, err := post(f.clients[rng.IntN(len(f.clients))], url, key, "amount=1")
				o.add(status, err)
			}
		})
	}
	return wg.Wait
}

// redeliver sends every key once more, from 8 goroutines, and checks each
// with check. A call whose Redis call did not answer in time (a busy
// machine; fsync on every write) is sent again, up to 5 times, as its
// client would: that is not a key held by anyone.
func (f *faultFleet) redeliver(url string, keys []string, o *outcomes, check func(key string, status int, err error)) {
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range 8 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(keys); i = int(next.Add(1) - 1) {
				status, _, err := post(f.clients[i%len(f.clients)], url, keys[i], "amount=1")
				for try := 1; try < 5 && errors.Is(err, ErrUnavailable); try++ {
					status, _, err = post(f.clients[i%len(f.clients)], url, keys[i], "amount=1")
				}
				o.add(status, err)
				check(keys[i], status, err)
			}
		})
	}
	wg.Wait()
}

// faultScenario is what happens to Redis while the writes run.
type faultScenario struct {
	name      string
	args      []string // of redis-server
	faults    func(p *redisProc)
	keepsData bool // Redis still holds the ledger after the faults
}

func TestLedgerFaultsNeverApplyTwice(t *testing.T) {
	run := func(d time.Duration) { time.Sleep(d) } // the writes go on meanwhile
	for _, sc := range []faultScenario{
		{"pause", nil, func(p *redisProc) {
			p.Pause()
			run(time.Second)
			p.Resume()
		}, true},
		{"pause, kill and restart with AOF always", aofAlways, func(p *redisProc) {
			p.Pause()
			run(time.Second)
			p.Resume()
			run(300 * time.Millisecond)
			p.Stop() // SIGKILL: steps sent meanwhile are never run
			run(300 * time.Millisecond)
			p.Start()
		}, true},
		{"kill and restart without persistence", nil, func(p *redisProc) {
			p.Stop()
			run(300 * time.Millisecond)
			p.Start()
		}, false},
	} {
		t.Run(sc.name, func(t *testing.T) {
			p := startRedis(t, sc.args...)
			srv := newApplyServer(t)
			f := newFaultFleet(t, p.Addr())
			var during outcomes
			var keys keyLog
			stop := make(chan struct{})
			wait := f.load(srv.URL, &keys, &during, stop)
			run(300 * time.Millisecond)
			sc.faults(p)
			run(500 * time.Millisecond)
			close(stop)
			wait()
			t.Logf("during the faults: %s", &during)

			if sc.keepsData {
				f.drained(t)
			}
			run(faultInFlightTTL) // every claim still open has expired: redeliveries now meet uncertain keys, not in-flight ones
			sent := keys.all()
			before := map[string]int{}
			for _, key := range sent {
				before[key] = srv.count(key)
			}
			var after outcomes
			f.redeliver(srv.URL, sent, &after, func(key string, status int, err error) {
				switch n := srv.count(key); {
				case n > 1:
					t.Errorf("key %s applied %d times", key, n)
				case !sc.keepsData && !errors.Is(err, ErrDataLost):
					t.Errorf("key %s redelivered after Redis lost its data: got %d %v, want refused with ErrDataLost", key, status, err)
				case sc.keepsData && before[key] == 0 && (err != nil || status != http.StatusCreated || n != 1):
					t.Errorf("key %s, never applied, redelivered: got %d %v (applied %d), want it applied: no claim that never sent may block it", key, status, err, n)
				}
			})
			for key := range before {
				if n := srv.count(key); n > 1 {
					t.Errorf("key %s applied %d times", key, n)
				}
			}
			t.Logf("redelivered after InFlightTTL: %s", &after)
			for i := range f.lost {
				want := int64(0)
				if !sc.keepsData {
					want = 1
				}
				if n := f.lost[i].Load(); n != want {
					t.Errorf("replica %d: OnDataLost reported %d times, want %d", i, n, want)
				}
			}
			if sc.keepsData && (after.reconcile.Load() > 0 || after.duplicate.Load() > 0 || after.unavailable.Load() > 0) {
				// Every applied write's result was recorded, late or not: none
				// is left uncertain, in flight or refused.
				t.Errorf("redelivered with Redis healthy again: got %s, want only 201s", &after)
			}
			if during.other.Load() > 0 || after.other.Load() > 0 {
				t.Errorf("unexpected outcomes: during %s; after %s", &during, &after)
			}
		})
	}
}
