package fleet

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// This file starts server processes (Serve) and stops them.

// ServerOptions are the settings of a fleet of server processes.
type ServerOptions struct {
	// Command runs Serve: a program and its leading arguments, to which
	// Serve's flags are appended (the command's own binary with -serve;
	// a test's binary, which runs Serve when Env says so).
	Command []string
	Env     []string // added to the process's environment
	N       int      // the number of processes
	Redis   string   // the Redis they share
	Prefix  string   // the ledger's key prefix
	Dir     string   // where their effects files go
	// LedgerTimeout is each server's LedgerConfig.Timeout; 0: the default.
	LedgerTimeout time.Duration
	// Bare serves the API without the Idempotency-Key middleware: servers
	// that do not honour keys, whatever a client declares.
	Bare bool
}

// Servers are running server processes.
type Servers struct {
	procs   []*serverProc
	effects []string
}

type serverProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	addr  string
}

// StartServers starts o.N server processes and waits until each listens.
func StartServers(o ServerOptions) (*Servers, error) {
	if o.N < 1 || len(o.Command) == 0 {
		return nil, errors.New("fleet: ServerOptions need a Command and N of at least 1")
	}
	s := &Servers{}
	for i := range o.N {
		path := filepath.Join(o.Dir, "effects-"+strconv.Itoa(i)+".log")
		args := append(append([]string(nil), o.Command[1:]...), "-redis", o.Redis, "-prefix", o.Prefix,
			"-effects", path, "-ledger-timeout", o.LedgerTimeout.String())
		if o.Bare {
			args = append(args, "-bare")
		}
		p, err := startServer(o.Command[0], args, o.Env)
		if err != nil {
			s.Stop()
			return nil, fmt.Errorf("server %d: %w", i, err)
		}
		s.procs = append(s.procs, p)
		s.effects = append(s.effects, path)
	}
	return s, nil
}

func startServer(bin string, args, env []string) (*serverProc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &serverProc{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	line, err := p.out.ReadString('\n') // it writes it once it listens
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		p.stop()
		return nil, fmt.Errorf("no address from the server (%q): %v", line, err)
	}
	p.addr = addr
	return p, nil
}

// Addrs are the servers' addresses, host:port.
func (s *Servers) Addrs() []string {
	var a []string
	for _, p := range s.procs {
		a = append(a, p.addr)
	}
	return a
}

// Effects counts the effects the servers recorded so far, by line: "k
// KEY" for a keyed charge, "u ID" for a note.
func (s *Servers) Effects() (map[string]int, error) { return readEffects(s.effects) }

// Stop ends the servers (their stdin closed, each shuts down, flushes its
// ledger and reports) and returns their reports.
func (s *Servers) Stop() ([]ServerStats, error) {
	var stats []ServerStats
	var errs []error
	for _, p := range s.procs {
		st, err := p.stop()
		stats = append(stats, st)
		errs = append(errs, err)
	}
	s.procs = nil
	return stats, errors.Join(errs...)
}

// stop closes the process's stdin and reads its report; a process that
// has not exited 30s later is killed.
func (p *serverProc) stop() (ServerStats, error) {
	_ = p.stdin.Close()
	var st ServerStats
	done := make(chan error, 1)
	go func() {
		out, err := io.ReadAll(p.out)
		if err == nil {
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			err = json.Unmarshal([]byte(lines[len(lines)-1]), &st)
		}
		done <- err
	}()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	var readErr error
	select {
	case readErr = <-done:
	case <-timer.C:
		_ = p.cmd.Process.Kill()
		readErr = <-done
	}
	if err := p.cmd.Wait(); err != nil {
		return st, fmt.Errorf("server %s: %w", p.addr, err)
	}
	if readErr != nil {
		return st, fmt.Errorf("server %s: its report: %w", p.addr, readErr)
	}
	return st, nil
}
