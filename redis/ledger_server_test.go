package retryfuseredis

import (
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// redisProc is a redis-server of a test's own started with extra
// arguments (persistence, a disabled command), which it keeps across Stop
// and Start: restarted with the same directory and AOF, it reloads what it
// persisted.
type redisProc struct {
	*server
	args []string
}

// The arguments of a Redis that loses no acknowledged write: AOF, fsync
// before each reply.
var aofAlways = []string{"--appendonly", "yes", "--appendfsync", "always"}

// startRedis starts a redis-server of the test's own with args added to
// those of startServer's; it is stopped when the test ends.
func startRedis(t testing.TB, args ...string) *redisProc {
	t.Helper()
	s := startServer(t) // a free port, a directory, the binary, the cleanup
	s.Stop()
	p := &redisProc{server: s, args: args}
	p.Start()
	return p
}

// Start starts the server with its arguments and waits (at most 10s) until
// it answers PING.
func (p *redisProc) Start() {
	s := p.server
	s.t.Helper()
	args := append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "",
		"--daemonize", "no", "--dir", s.dir, "--loglevel", "warning"}, p.args...)
	s.cmd = exec.Command(s.bin, args...)
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
