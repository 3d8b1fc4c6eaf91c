package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a redis-server this command started on loopback.
type redisServer struct {
	cmd  *exec.Cmd
	dir  string
	addr string
}

func startRedis() (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("no -redis address given and no redis-server installed: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "fleetbench")
	if err != nil {
		return nil, err
	}
	s := &redisServer{dir: dir, addr: "127.0.0.1:" + strconv.Itoa(port)}
	s.cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--dir", dir, "--loglevel", "warning")
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); c.Ping(context.Background()).Err() != nil; {
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("redis-server on %s did not answer PING within 10s", s.addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return s, nil
}

func (s *redisServer) pause()  { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }
func (s *redisServer) resume() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }

func (s *redisServer) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	os.RemoveAll(s.dir)
}

// scriptCalls is the number of EVALSHA and EVAL calls Redis has run.
func scriptCalls(c *redis.Client) (int64, error) {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		return 0, err
	}
	var n int64
	for line := range strings.Lines(info) {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, ok := strings.CutPrefix(line, cmd); ok {
				calls, _, _ := strings.Cut(rest, ",")
				v, err := strconv.ParseInt(calls, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("INFO commandstats: %q: %w", line, err)
				}
				n += v
			}
		}
	}
	return n, nil
}
