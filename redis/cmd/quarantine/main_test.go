package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	retryfuseredis "github.com/retryfuse/retryfuse/redis"
	"go.uber.org/goleak"
)

// The command against a real redis-server (REDIS_ADDR; scripts/redis-test
// starts one): refused without its flags, it ends a quarantine and the
// ledger's processes take keys again.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestQuarantineCommandEndsAQuarantine(t *testing.T) {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("REDIS_ADDR is empty (CI=true: the Redis tests must run; use scripts/redis-test)")
		}
		t.Skip("REDIS_ADDR is empty; run scripts/redis-test")
	}
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer c.Close()
	prefix := "rftest:quarantine-cmd:" + rand.Text()[:8] + ":"
	var ended []retryfuseredis.QuarantineEnd
	l, err := retryfuseredis.NewLedger(c, retryfuseredis.LedgerConfig{Prefix: prefix, Quarantine: time.Hour, AllowWithoutPersistence: true,
		OnQuarantineEnd: func(e retryfuseredis.QuarantineEnd) { ended = append(ended, e) }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(ctx)
	var fp [32]byte
	if _, err := l.Begin(ctx, "order-1", fp); err != nil {
		t.Fatal(err)
	}
	keys := c.Keys(ctx, prefix+"*").Val()
	c.Del(ctx, keys...) // what a Redis restarted without persistence shows
	if _, err := l.Begin(ctx, "order-1", fp); !errors.Is(err, retryfuseredis.ErrDataLost) {
		t.Fatalf("Begin after the loss: %v, want ErrDataLost", err)
	}

	cmd := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(args, &out, &errb)
		return code, out.String(), errb.String()
	}
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"-redis", addr, "-prefix", prefix, "-reconciled", "-reason", "r"}, 2, "-end is required"},
		{[]string{"-prefix", prefix, "-end", "-reconciled", "-reason", "r"}, 2, "give one of -redis or -cluster"},
		{[]string{"-redis", addr, "-prefix", prefix, "-end", "-reason", "r"}, 1, "refused"},
		{[]string{"-redis", addr, "-prefix", prefix, "-end", "-reconciled"}, 1, "Reason must say who"},
	} {
		code, _, stderr := cmd(tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.says) {
			t.Errorf("quarantine %v: exit %d, %q; want %d, saying %q", tc.args, code, stderr, tc.code, tc.says)
		}
	}
	if _, err := l.Begin(ctx, "order-1", fp); !errors.Is(err, retryfuseredis.ErrDataLost) {
		t.Fatalf("Begin after the refusals: %v, want ErrDataLost still", err)
	}

	code, stdout, stderr := cmd("-redis", addr, "-prefix", prefix, "-end", "-reconciled", "-reason", "bob: orders checked")
	if code != 0 || !strings.Contains(stdout, "ended: bob: orders checked") {
		t.Fatalf("quarantine -end: exit %d, %q %q", code, stdout, stderr)
	}
	// The ledger's process learns of it at its next look, within a second.
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := l.Begin(ctx, "order-1", fp)
		if err == nil {
			break
		}
		if !errors.Is(err, retryfuseredis.ErrDataLost) || time.Now().After(deadline) {
			t.Fatalf("Begin after the end: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // a bounded wait on a real socket
	}
	if len(ended) != 1 || ended[0].Reason != "bob: orders checked" {
		t.Errorf("OnQuarantineEnd: %+v, want the command's end", ended)
	}
	if code, _, stderr := cmd("-redis", addr, "-prefix", prefix, "-end", "-reconciled", "-reason", "again"); code != 1 || !strings.Contains(stderr, "not in quarantine") {
		t.Errorf("quarantine -end out of quarantine: exit %d, %q; want 1, not in quarantine", code, stderr)
	}
}
