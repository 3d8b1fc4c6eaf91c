package retryfuseredis

import (
	"bytes"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// heldNow is the lease held, for tests.
func (s *shared) heldNow() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// scriptCalls is the number of EVALSHA and EVAL calls the server has run
// (INFO commandstats).
func scriptCalls(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(bg(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for line := range strings.Lines(info) {
		for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
			rest, ok := strings.CutPrefix(line, cmd)
			if !ok {
				continue
			}
			calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
			v, err := strconv.ParseInt(calls, 10, 64)
			if err != nil {
				t.Fatalf("INFO commandstats: %q: %v", line, err)
			}
			n += v
		}
	}
	return n
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.String()
}
