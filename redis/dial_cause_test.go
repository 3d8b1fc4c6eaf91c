package retryfuseredis

import (
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/budget"
)

// With Redis down, the errors of the ledger and the budgets name why it
// could not be reached, not only the deadline that cut the wait short.

// TestRedisDownErrorsCarryTheDialError: a ledger whose Redis is gone (its
// port closed) fails Begin with an error that carries the refused dial,
// through the Transport too; so does a budget's failed sync, which
// AllowRetry reports.
func TestRedisDownErrorsCarryTheDialError(t *testing.T) {
	s := startServer(t)
	c := newClient(t, s.Addr())
	l, err := NewLedger(c, LedgerConfig{AllowWithoutPersistence: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Redis stays down: the cancellations of the failed Begins are given up.
		ctx, cancel := context.WithTimeout(bg(), 100*time.Millisecond)
		defer cancel()
		_ = l.Close(ctx)
	})
	s.Stop()
	want := "connect: connection refused"

	_, err = l.Begin(bg(), "k", fpA)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Begin with Redis down: got %v, want an error wrapping ErrUnavailable and ECONNREFUSED, naming it", err)
	}
	client := newTransport(t, &retryfuse.Transport{Keys: retryfuse.KeyPolicy{Ledger: l}})
	srv, _ := newStallServer(t)
	resp, err := keyedPost(bg(), client, srv.URL, "order-1")
	if err == nil {
		resp.Body.Close()
		t.Fatalf("keyed POST with Redis down: got %d, want an error", resp.StatusCode)
	}
	if !errors.Is(err, retryfuse.ErrLedgerUnavailable) || !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), want) {
		t.Fatalf("keyed POST with Redis down: got %v, want ErrLedgerUnavailable wrapping ECONNREFUSED, naming it", err)
	}
	if n := srv.Requests(); n != 0 {
		t.Fatalf("server got %d requests, want none", n)
	}

	b, err := newRatioBudget(c, "down", budget.RatioConfig{}, BudgetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.s.asks = 1 // a retry was asked for: the sync leases
	if err := b.s.sync(bg(), false); !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("budget sync with Redis down: got %v, want an error wrapping ErrUnavailable and ECONNREFUSED", err)
	}
	if _, err := b.AllowRetry(bg()); !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), want) {
		t.Fatalf("AllowRetry after a failed sync: got %v, want an error wrapping ErrUnavailable and ECONNREFUSED, naming it", err)
	}
}

// TestDialErrorOnlyWhenRedisGaveNoAnswer: the client's last dial error is
// carried by the error of a call that got no answer, not by one that
// Redis answered with an error, nor by one that is a failed dial itself;
// and a successful dial clears it.
func TestDialErrorOnlyWhenRedisGaveNoAnswer(t *testing.T) {
	c := newClient(t, sharedAddr(t))
	w := watchDials(c)
	var refused error = &fakeDialError{}
	w.last.Store(&refused)
	if err := unavailable(c, "", context.DeadlineExceeded); !errors.Is(err, refused) || !errors.Is(err, ErrUnavailable) ||
		err.Error() != "retryfuseredis: redis unavailable: context deadline exceeded (last connection attempt: "+refused.Error()+")" {
		t.Fatalf("no answer, last dial failed: got %v, want ErrUnavailable carrying the dial error", err)
	}
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	if err := unavailable(c, "", dial); errors.Is(err, refused) || !errors.Is(err, dial) {
		t.Fatalf("a failed dial: got %v, want it alone", err)
	}
	reply := c.Do(bg(), "NO-SUCH-COMMAND").Err() // dials: a successful dial
	var re redis.Error
	if !errors.As(reply, &re) {
		t.Fatalf("unknown command: got %v, want a reply error", reply)
	}
	if err := w.lastError(); err != nil {
		t.Fatalf("after a successful dial: last dial error %v, want nil", err)
	}
	w.last.Store(&refused)
	if err := unavailable(c, "", reply); errors.Is(err, refused) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Redis answered: got %v, want ErrUnavailable without the dial error", err)
	}
}

type fakeDialError struct{}

func (*fakeDialError) Error() string { return "dial tcp 127.0.0.1:1: connect: connection refused" }

// TestDialHookOncePerClient: the budgets and ledgers that share a client
// give it one dial hook, and the hook's entry goes with the client.
func TestDialHookOncePerClient(t *testing.T) {
	c := sharedClient(t)
	w := watchDials(c)
	if w == nil {
		t.Fatal("a *redis.Client is not watched")
	}
	for range 3 {
		if _, err := newRatioBudget(c, "shared", budget.RatioConfig{}, BudgetOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := newTokenBucket(c, "shared", budget.TokenBucketConfig{}, BudgetOptions{}); err != nil {
			t.Fatal(err)
		}
		newTestLedger(t, LedgerConfig{})
	}
	if got := watchOf(c); got != w {
		t.Fatal("a client shared by budgets and ledgers was given another dial hook")
	}
	if watchOf(newClient(t, sharedAddr(t))) != nil {
		t.Fatal("a client given to no budget or ledger has a dial hook")
	}

	key := func() weak.Pointer[redis.Client] {
		c := redis.NewClient(&redis.Options{Addr: sharedAddr(t), ContextTimeoutEnabled: true})
		defer c.Close()
		watchDials(c)
		return weak.Make(c)
	}()
	for i := 0; ; i++ {
		runtime.GC()
		watches.mu.Lock()
		_, held := watches.m[key]
		watches.mu.Unlock()
		if !held {
			break
		}
		if i == 100 {
			t.Fatal("the dial hook of a client collected is still held after 100 collections")
		}
		runtime.Gosched()
	}
}
