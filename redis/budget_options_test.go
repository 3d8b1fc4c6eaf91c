package retryfuseredis

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/budget"
)

func TestBudgetSyncOptionsValidated(t *testing.T) {
	c := newClient(t, "127.0.0.1:1")
	for name, opts := range map[string]BudgetOptions{
		"negative SyncInterval": {SyncInterval: -1},
		"negative MaxLease":     {MaxLease: -1},
	} {
		if _, err := NewRatioBudget(c, "n", budget.RatioConfig{}, opts); !errors.Is(err, retryfuse.ErrInvalidPolicy) || !strings.Contains(err.Error(), strings.TrimPrefix(name, "negative ")) {
			t.Errorf("NewRatioBudget, %s: got %v, want an error wrapping ErrInvalidPolicy that names the field", name, err)
		}
		if _, err := TokenBuckets(c, budget.TokenBucketConfig{}, opts); !errors.Is(err, retryfuse.ErrInvalidPolicy) {
			t.Errorf("TokenBuckets, %s: got %v, want an error wrapping ErrInvalidPolicy", name, err)
		}
	}
}

// TestRedisLoggerRoutesGoRedisLogs: with RedisLogger set, a failed dial is
// logged there, not to stderr.
func TestRedisLoggerRoutesGoRedisLogs(t *testing.T) {
	var buf bytes.Buffer
	var mu syncBuffer
	mu.w = &buf
	l := slog.New(slog.NewTextHandler(&mu, nil))
	t.Cleanup(func() { redis.SetLogger(quietLogger{}) })
	c := deadClient(t)
	b, err := newTokenBucket(c, "logs", budget.TokenBucketConfig{}, BudgetOptions{RedisLogger: l, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b.s.asks = 1
	// go-redis logs once its dial retries (with backoff) are spent: sync
	// until it has, at most 10s.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(mu.String(), "source=go-redis") {
		if time.Now().After(deadline) {
			t.Fatalf("RedisLogger got %q after 10s, want go-redis's lines", mu.String())
		}
		_ = b.s.sync(context.Background(), false)
	}
	if got := mu.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "failed to dial") {
		t.Fatalf("RedisLogger got %q, want go-redis's dial failure at WARN", got)
	}
}
