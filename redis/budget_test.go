package retryfuseredis

import (
	"context"
	"math"
	"math/rand/v2"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse/budget"
)

// testClock is a settable clock passed to the scripts in place of TIME.
type testClock struct{ t time.Time }

func (c *testClock) now() time.Time      { return c.t }
func (c *testClock) add(d time.Duration) { c.t = c.t.Add(d) }
func newTestClock() *testClock           { return &testClock{t: time.UnixMicro(1_700_000_000_000_000)} }
func bg() context.Context                { return context.Background() }

// leaseOne runs b's sync script by hand, as a retry asked for: it leases
// one retry, or none.
func leaseOne(t *testing.T, s *shared) bool {
	t.Helper()
	leased, _, err := s.kind.sync(bg(), s.client, s.key, 0, 0, 0, 0, 1)
	if err != nil {
		t.Fatalf("sync: unexpected error %v", err)
	}
	return leased == 1
}

// deposit runs b's sync script by hand, as one request recorded.
func deposit(t *testing.T, s *shared) {
	t.Helper()
	if _, _, err := s.kind.sync(bg(), s.client, s.key, 1, 0, 0, 0, 0); err != nil {
		t.Fatalf("sync: unexpected error %v", err)
	}
}

func mustAllow(t *testing.T, b budget.Budget) bool {
	t.Helper()
	ok, err := b.AllowRetry(bg())
	if err != nil {
		t.Fatalf("AllowRetry: unexpected error %v", err)
	}
	return ok
}

func TestTokenBucketScriptSteps(t *testing.T) { onSingleAndCluster(t, testTokenBucketScriptSteps) }

func testTokenBucketScriptSteps(t *testing.T, c redis.UniversalClient) {
	b, err := newTokenBucket(c, "steps", budget.TokenBucketConfig{Capacity: 2, Refill: 1, Interval: time.Second}, BudgetOptions{Prefix: uniq(t), Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	clk := newTestClock()
	b.s.kind.(*bucketKind).now = clk.now
	steps := []struct {
		advance time.Duration
		want    bool
		why     string
	}{
		{0, true, "starts full: first token"},
		{0, true, "second token"},
		{0, false, "empty"},
		{500 * time.Millisecond, false, "half a token"},
		{500 * time.Millisecond, true, "a whole token after one interval"},
		{-10 * time.Second, false, "time going back earns nothing"},
		{20 * time.Second, true, "refill capped at capacity: first"},
		{0, true, "refill capped at capacity: second"},
		{0, false, "refill capped at capacity: no third"},
	}
	for i, s := range steps {
		clk.add(s.advance)
		if got := leaseOne(t, b.s); got != s.want {
			t.Fatalf("step %d (%s): got %v, want %v", i, s.why, got, s.want)
		}
	}
}

func TestRatioScriptSteps(t *testing.T) { onSingleAndCluster(t, testRatioScriptSteps) }

func testRatioScriptSteps(t *testing.T, c redis.UniversalClient) {
	b, err := newRatioBudget(c, "steps", budget.RatioConfig{Ratio: 0.5, MinPerSecond: -1, Window: time.Second}, BudgetOptions{Prefix: uniq(t), Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	clk := newTestClock()
	b.s.kind.(*ratioKind).now = clk.now
	if leaseOne(t, b.s) {
		t.Fatal("no reserve, no request: got a retry, want none")
	}
	deposit(t, b.s)
	if leaseOne(t, b.s) {
		t.Fatal("one request at ratio 0.5: got a retry, want none (half a retry)")
	}
	deposit(t, b.s)
	if !leaseOne(t, b.s) {
		t.Fatal("two requests at ratio 0.5: got no retry, want one")
	}
	if leaseOne(t, b.s) {
		t.Fatal("credit spent: got a second retry, want none")
	}
	clk.add(time.Second)
	deposit(t, b.s)
	deposit(t, b.s)
	if !leaseOne(t, b.s) {
		t.Fatal("after the window the old retry has left: got no retry, want one")
	}
}

// step is one step of a comparison with an in-memory budget: the test
// clock moves by d (backwards too), then a request is recorded or a retry
// asked for.
type step struct {
	d     time.Duration
	retry bool
}

// memoryRetries runs steps against an in-memory budget, made by newBudget,
// inside a synctest bubble whose clock follows the test clock, and returns
// the answer to each retry, in order. The bubble's clock cannot go back: a
// step backwards leaves it at the latest time seen, which is how the
// in-memory budgets take time going backwards ("no time has passed").
func memoryRetries(t *testing.T, newBudget func() (budget.Budget, error), steps []step) []bool {
	t.Helper()
	var answers []bool
	synctest.Test(t, func(t *testing.T) {
		mb, err := newBudget()
		if err != nil {
			t.Fatal(err)
		}
		// The test clock, and the latest time it showed; the bubble's clock
		// stands for the latter, from the first step on.
		var pos, latest time.Duration
		for i, s := range steps {
			switch pos += s.d; {
			case i == 0:
				latest = pos
			case pos > latest:
				time.Sleep(pos - latest)
				latest = pos
			}
			if !s.retry {
				mb.RecordRequest(bg())
				continue
			}
			answers = append(answers, mustAllow(t, mb))
		}
	})
	return answers
}

// TestTokenBucketMatchesMemory drives the Redis bucket and
// budget.TokenBucket with the same times and checks every answer.
func TestTokenBucketMatchesMemory(t *testing.T) { onSingleAndCluster(t, testTokenBucketMatchesMemory) }

func testTokenBucketMatchesMemory(t *testing.T, c redis.UniversalClient) {
	cfgs := []budget.TokenBucketConfig{
		{},
		{Capacity: 3, Refill: 0.5, Interval: 100 * time.Millisecond},
		{Capacity: 1.5, Refill: 3, Interval: 7 * time.Millisecond},
	}
	for ci, cfg := range cfgs {
		rb, err := newTokenBucket(c, "diff", cfg, BudgetOptions{Prefix: uniq(t), Timeout: testTimeout})
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, uint64(ci)))
		steps := make([]step, 300)
		for i := range steps {
			steps[i] = step{d: randomStep(rng, 300*time.Millisecond), retry: true}
		}
		want := memoryRetries(t, func() (budget.Budget, error) { return budget.NewTokenBucket(cfg) }, steps)

		clk := newTestClock()
		k := rb.s.kind.(*bucketKind)
		k.now = clk.now
		k.args[2] = keepForTest
		for i, s := range steps {
			clk.add(s.d)
			if got := leaseOne(t, rb.s); got != want[i] {
				t.Fatalf("config %d, step %d: Redis got %v, memory %v", ci, i, got, want[i])
			}
		}
	}
}

// TestRatioMatchesMemory drives the Redis ratio budget and
// budget.Ratio with the same times and operations.
func TestRatioMatchesMemory(t *testing.T) { onSingleAndCluster(t, testRatioMatchesMemory) }

func testRatioMatchesMemory(t *testing.T, c redis.UniversalClient) {
	cfgs := []budget.RatioConfig{
		{Window: time.Second},
		{Ratio: 0.5, MinPerSecond: -1, Window: time.Second},
		{Ratio: 0.25, MinPerSecond: 2, Window: 100 * time.Millisecond},
		{Ratio: 0.3, MinPerSecond: 0.5, Window: 10 * time.Microsecond * 1001},
	}
	for ci, cfg := range cfgs {
		rb, err := newRatioBudget(c, "diff", cfg, BudgetOptions{Prefix: uniq(t), Timeout: testTimeout})
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(2, uint64(ci)))
		steps := make([]step, 600)
		for i := range steps {
			steps[i] = step{d: randomStep(rng, cfg.Window/8), retry: rng.IntN(3) == 0}
		}
		want := memoryRetries(t, func() (budget.Budget, error) { return budget.NewRatio(cfg) }, steps)

		clk := newTestClock()
		k := rb.s.kind.(*ratioKind)
		k.now = clk.now
		k.args[3] = keepForTest
		granted, asked := 0, 0
		for i, s := range steps {
			clk.add(s.d)
			if !s.retry {
				deposit(t, rb.s)
				continue
			}
			got := leaseOne(t, rb.s)
			if got != want[asked] {
				t.Fatalf("config %d, step %d: Redis got %v, memory %v", ci, i, got, want[asked])
			}
			if got {
				granted++
			}
			asked++
		}
		if granted == 0 {
			t.Fatalf("config %d: no retry granted in 600 steps: the comparison shows nothing", ci)
		}
	}
}

// keepForTest replaces a budget's idle expiry (in ms) in the comparisons
// with the in-memory budgets: keys expire by real time, which a test clock
// does not move, so a short window's key could vanish between two steps.
const keepForTest = int64(time.Minute / time.Millisecond)

// randomStep is a step of time: mostly forward up to max, sometimes none,
// sometimes backwards.
func randomStep(rng *rand.Rand, max time.Duration) time.Duration {
	switch rng.IntN(10) {
	case 0:
		return 0
	case 1:
		return -time.Duration(rng.Int64N(int64(max)))
	}
	return time.Duration(rng.Int64N(int64(max))).Truncate(time.Microsecond)
}

// TestTokenBucketServerClock refills from Redis's own clock (TIME): a
// token taken is back once the server's time has moved one interval on.
func TestTokenBucketServerClock(t *testing.T) {
	c := sharedClient(t)
	b, err := newTokenBucket(c, "clock", budget.TokenBucketConfig{Capacity: 1, Refill: 1, Interval: 100 * time.Millisecond}, BudgetOptions{Prefix: uniq(t), Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if !leaseOne(t, b.s) {
		t.Fatal("first token: got refused, want granted")
	}
	if leaseOne(t, b.s) {
		t.Fatal("second token at once: got granted, want refused")
	}
	for !leaseOne(t, b.s) {
		if time.Since(start) > 5*time.Second {
			t.Fatal("no token after 5s, want one after 100ms of server time")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d := time.Since(start); d < 90*time.Millisecond {
		t.Fatalf("token back after %v, want at least one interval (100ms)", d)
	}
}

func TestBudgetKeysExpire(t *testing.T) {
	c := sharedClient(t)
	tb, err := newTokenBucket(c, "ttl", budget.TokenBucketConfig{Capacity: 2, Refill: 1, Interval: 100 * time.Millisecond}, BudgetOptions{Prefix: uniq(t), Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	leaseOne(t, tb.s)
	// Empty to full takes 200ms; the key lives that long plus a second.
	if pttl := c.PTTL(bg(), tb.Key()).Val(); pttl <= time.Second || pttl > 1200*time.Millisecond {
		t.Fatalf("token bucket PTTL: got %v, want in (1s, 1.2s]", pttl)
	}

	rb, err := newRatioBudget(c, "ttl", budget.RatioConfig{Ratio: 1, MinPerSecond: -1, Window: 100 * time.Millisecond}, BudgetOptions{Prefix: uniq(t), Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	deposit(t, rb.s)
	if pttl := c.PTTL(bg(), rb.Key()).Val(); pttl <= 0 || pttl > 110*time.Millisecond {
		t.Fatalf("ratio budget PTTL: got %v, want in (0, 110ms] (window plus one bucket)", pttl)
	}
	waitGone(t, c, rb.Key())
	if leaseOne(t, rb.s) {
		t.Fatal("after expiry: got a retry from an expired deposit, want none")
	}
}

// TestRatioLongWindowExpiry pins that the longest Window a Duration can
// hold gives a key that lasts: Window plus one bucket must not wrap round.
func TestRatioLongWindowExpiry(t *testing.T) {
	c := sharedClient(t)
	rb, err := newRatioBudget(c, "long", budget.RatioConfig{Window: math.MaxInt64}, BudgetOptions{Prefix: uniq(t), Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	deposit(t, rb.s)
	const atLeast = int64(100 * 365 * 24 * time.Hour / time.Millisecond)
	if pttl := pttlMillis(t, c, rb.Key()); pttl < atLeast {
		t.Fatalf("ratio budget PTTL with Window MaxInt64: got %dms, want at least %dms", pttl, atLeast)
	}
	c.Del(bg(), rb.Key())
}

// TestTokenBucketSlowFillExpiry pins that a bucket that takes longer than
// a year to fill keeps its key until it is full: an expired bucket is a
// full one, so expiring sooner would hand back tokens not yet earned.
func TestTokenBucketSlowFillExpiry(t *testing.T) {
	c := sharedClient(t)
	const day = 24 * time.Hour
	tb, err := newTokenBucket(c, "slow", budget.TokenBucketConfig{Capacity: 2, Refill: 1, Interval: 400 * day}, BudgetOptions{Prefix: uniq(t), Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	leaseOne(t, tb.s)
	want := int64(800 * day / time.Millisecond) // empty to full: 2 tokens at 1 per 400 days
	if pttl := pttlMillis(t, c, tb.Key()); pttl < want {
		t.Fatalf("token bucket PTTL: got %dms, want at least %dms (the time to fill)", pttl, want)
	}
	c.Del(bg(), tb.Key())
	huge, err := newTokenBucket(c, "huge", budget.TokenBucketConfig{Capacity: 1e300, Refill: 1e-300}, BudgetOptions{Prefix: uniq(t), Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	leaseOne(t, huge.s) // a fill time past the longest Duration is still a valid expiry
	if pttl := pttlMillis(t, c, huge.Key()); pttl < want {
		t.Fatalf("token bucket PTTL, fill time beyond any Duration: got %dms, want at least %dms", pttl, want)
	}
	c.Del(bg(), huge.Key())
}

// pttlMillis is key's PTTL in milliseconds, read as the integer Redis
// sends: go-redis's PTTL overflows a Duration beyond some 292 years.
func pttlMillis(t *testing.T, c *redis.Client, key string) int64 {
	t.Helper()
	ms, err := c.Do(bg(), "PTTL", key).Int64()
	if err != nil {
		t.Fatalf("PTTL %s: %v", key, err)
	}
	return ms
}

// waitGone waits (at most 5s) until key has expired.
func waitGone(t *testing.T, c *redis.Client, key string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.Exists(bg(), key).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("key %s still there after 5s (PTTL %v)", key, c.PTTL(bg(), key).Val())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// deadClient returns a client of a loopback port nothing listens on.
func deadClient(t *testing.T) *redis.Client {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return newClient(t, addr)
}
