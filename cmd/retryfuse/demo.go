package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/breaker"
)

// The policy both sides of the demo share.
const (
	demoAttempts       = 3
	demoInitialBackoff = 20 * time.Millisecond
	demoMaxBackoff     = 200 * time.Millisecond
	// demoAttemptTimeout is generous: the servers answer at once, but a
	// loaded machine (or the race detector) can take a while to accept a
	// hundred connections opened together, and only the lost response is
	// about timeouts.
	demoAttemptTimeout = time.Second
	// lostAttemptTimeout is the per-attempt timeout in the lost-response
	// scenario, whose server stalls past it.
	lostAttemptTimeout = 150 * time.Millisecond
)

// demoConfig holds what the scenarios are run with.
type demoConfig struct {
	callers     int           // storm: concurrent callers
	deadline    time.Duration // Retry-After: the caller's deadline
	openTimeout time.Duration // brake: the breaker's open interval
	downFor     time.Duration // brake: how long the dependency fails
	runFor      time.Duration // brake: how long calls arrive
	every       time.Duration // brake: one call arrives every so often
	tailCalls   int           // tail latency: sequential calls per side
	listen      func() (net.Listener, error)
	// dial connects the clients to what listen made; nil: the network's
	// own dialer (see servers).
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

func defaultDemoConfig() demoConfig {
	return demoConfig{
		callers:     100,
		deadline:    time.Second,
		openTimeout: 200 * time.Millisecond,
		downFor:     500 * time.Millisecond,
		runFor:      time.Second,
		every:       5 * time.Millisecond,
		tailCalls:   tailCalls,
		listen:      listenLoopback,
	}
}

// demoResults is everything the demo measured; the table is printed from it.
type demoResults struct {
	Storm      stormResults
	Lost       lostResults
	RetryAfter retryAfterResults
	Brake      brakeResults
	Tail       tailResults
	Overload   overloadResults
	Exactly    exactlyResults
	Crash      crashResults
}

// runDemo runs the demo and prints its table to stdout. It returns the
// process exit code: 0 on success, 1 when the demo could not run (a server
// could not start), 2 for bad arguments.
func runDemo(args []string, stdout, stderr io.Writer) int {
	_, code := demoMain(defaultDemoConfig(), args, stdout, stderr)
	return code
}

// demoMain is runDemo from cfg, also returning what was measured.
func demoMain(cfg demoConfig, args []string, stdout, stderr io.Writer) (demoResults, int) {
	fs := flag.NewFlagSet("retryfuse demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.callers, "callers", cfg.callers, "concurrent callers in the storm")
	fs.DurationVar(&cfg.deadline, "deadline", cfg.deadline, "the caller's deadline in the Retry-After scenario")
	if err := fs.Parse(args); err != nil {
		return demoResults{}, 2
	}
	if fs.NArg() > 0 || cfg.callers < 1 || cfg.deadline <= 0 {
		fmt.Fprintln(stderr, "usage: retryfuse demo [-callers n] [-deadline d]")
		return demoResults{}, 2
	}
	res, err := measure(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "retryfuse demo:", err)
		return res, 1
	}
	if err := printTable(stdout, cfg, res); err != nil {
		fmt.Fprintln(stderr, "retryfuse demo:", err)
		return res, 1
	}
	return res, 0
}

// measure runs the scenarios one after the other.
func measure(cfg demoConfig) (demoResults, error) {
	srv := &servers{listen: cfg.listen, dial: cfg.dial}
	defer srv.close()
	var (
		res demoResults
		err error
	)
	if res.Storm, err = runStorm(srv, cfg); err != nil {
		return res, err
	}
	if res.Lost, err = runLost(srv); err != nil {
		return res, err
	}
	if res.RetryAfter, err = runRetryAfter(srv, cfg); err != nil {
		return res, err
	}
	if res.Brake, err = runBrake(srv, cfg); err != nil {
		return res, err
	}
	if res.Tail, err = runTail(srv, cfg.tailCalls); err != nil {
		return res, err
	}
	if res.Overload, err = runOverload(srv); err != nil {
		return res, err
	}
	if res.Exactly, err = runExactly(srv); err != nil {
		return res, err
	}
	if res.Crash, err = runCrash(srv); err != nil {
		return res, err
	}
	return res, nil
}

// newPlain returns the plain loop, on a base transport of its own.
func (s *servers) newPlain(attemptTimeout time.Duration) plainLoop {
	return plainLoop{
		client:         &http.Client{Transport: s.transport()},
		attempts:       demoAttempts,
		initialBackoff: demoInitialBackoff,
		maxBackoff:     demoMaxBackoff,
		attemptTimeout: attemptTimeout,
	}
}

// newFuse returns a retryfuse Transport with the shared policy; everything
// else is left at its default unless set by the caller.
func (s *servers) newFuse(attemptTimeout time.Duration) *retryfuse.Transport {
	return &retryfuse.Transport{
		Base: s.transport(),
		Retry: retryfuse.RetryPolicy{
			MaxAttempts:    demoAttempts,
			InitialBackoff: demoInitialBackoff,
			MaxBackoff:     demoMaxBackoff,
			AttemptTimeout: attemptTimeout,
		},
	}
}

// drainClose discards what is left of a response.
func drainClose(resp *http.Response) {
	if resp != nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
}

// describe names an outcome briefly: a status, or the error's kind.
func describe(resp *http.Response, err error) string {
	var (
		rec  *retryfuse.ReconcileRequiredError
		open *breaker.OpenError
	)
	switch {
	case errors.As(err, &rec):
		return "*ReconcileRequiredError"
	case errors.As(err, &open):
		return "*breaker.OpenError"
	case errors.Is(err, context.DeadlineExceeded):
		return "context deadline exceeded"
	case err != nil:
		return "error: " + err.Error()
	case resp != nil:
		return resp.Status
	}
	return "nothing"
}
