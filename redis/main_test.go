package retryfuseredis

import (
	"bufio"
	"context"
	"crypto/rand"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// Tests run against a real redis-server. The shared one is given by
// REDIS_ADDR (scripts/redis-test starts one); tests that stop Redis start
// their own. Without Redis, the tests fail under CI=true and skip
// otherwise.

func TestMain(m *testing.M) {
	// go-redis logs every failed dial; the tests make many on purpose.
	redis.SetLogger(quietLogger{})
	goleak.VerifyTestMain(m)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// needRedis reports a missing dependency: fatal under CI, else a skip.
func needRedis(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: the Redis tests must run; use scripts/redis-test)", why)
	}
	t.Skipf("%s; run scripts/redis-test to run the Redis tests", why)
}

// sharedAddr returns REDIS_ADDR.
func sharedAddr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		needRedis(t, "REDIS_ADDR is empty")
	}
	return addr
}

// newClient returns a client of addr, closed when the test ends.
func newClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// sharedClient returns a client of the shared server.
func sharedClient(t testing.TB) *redis.Client {
	t.Helper()
	c := newClient(t, sharedAddr(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("REDIS_ADDR %s: PING: %v", sharedAddr(t), err)
	}
	return c
}

// clusterClient returns a client of the shared Redis Cluster, given by
// REDIS_CLUSTER_ADDRS (comma-separated; scripts/redis-test starts a
// 3-master cluster), closed when the test ends.
func clusterClient(t testing.TB) *redis.ClusterClient {
	t.Helper()
	env := os.Getenv("REDIS_CLUSTER_ADDRS")
	if env == "" {
		needRedis(t, "REDIS_CLUSTER_ADDRS is empty")
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(env, ","), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		return m.Ping(ctx).Err()
	}); err != nil {
		t.Fatalf("REDIS_CLUSTER_ADDRS %s: PING: %v", env, err)
	}
	return c
}

// uniq returns a key prefix of its own for a test, so that tests share the
// server without touching each other's keys.
func uniq(t testing.TB) string {
	return "rftest:" + t.Name() + ":" + rand.Text()[:8] + ":"
}

// server is a redis-server process of a test's own, on a loopback port
// that stays the same across Stop and Start.
type server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	cmd  *exec.Cmd
}

// startServer starts a redis-server of the test's own on a free loopback
// port; it is stopped when the test ends.
func startServer(t testing.TB) *server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		needRedis(t, "redis-server is not installed")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &server{t: t, bin: bin, dir: t.TempDir(), port: port}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

func (s *server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Start starts the server and waits (at most 10s) until it answers PING.
func (s *server) Start() {
	s.t.Helper()
	s.cmd = exec.Command(s.bin, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", s.dir, "--loglevel", "warning")
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !ping(s.Addr()) {
		if time.Now().After(deadline) {
			s.Stop()
			s.t.Fatalf("redis-server on %s did not answer PING within 10s", s.Addr())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop kills the server and waits for it to exit.
func (s *server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a paused server cannot die of SIGKILL later than now
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Pause stops the server's process without closing its sockets (SIGSTOP):
// a Redis that accepts connections and never answers. Resume undoes it.
func (s *server) Pause()  { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }
func (s *server) Resume() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }

func ping(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && line == "+PONG\r\n"
}

// testTimeout bounds the Redis calls of tests that are not about the
// timeout: generous, so that a busy machine under the race detector does
// not turn into a failed check.
const testTimeout = 5 * time.Second
