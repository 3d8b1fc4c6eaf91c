package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// This file runs a phase: a load through the fault proxy, Redis faults
// meanwhile, and then every keyed write sent once more, straight to the
// servers, before the servers' effects are counted.

// Fleet is a Redis (with its append-only file, fsync always) and the
// server processes that share it.
type Fleet struct {
	Redis   *Redis
	Servers *Servers
}

// StartFleet starts a Redis with its files in dir, and the servers of o
// on it (o.Redis is set here).
func StartFleet(dir string, o ServerOptions) (*Fleet, error) {
	r, err := StartRedis(dir, AOFAlways...)
	if err != nil {
		return nil, err
	}
	o.Redis, o.Dir = r.Addr(), dir
	s, err := StartServers(o)
	if err != nil {
		r.Kill()
		return nil, err
	}
	return &Fleet{Redis: r, Servers: s}, nil
}

// Close stops the servers and Redis, and returns the servers' reports.
func (f *Fleet) Close() ([]ServerStats, error) {
	stats, err := f.Servers.Stop()
	f.Redis.Kill()
	return stats, err
}

// PhaseOptions are the settings of one phase.
type PhaseOptions struct {
	Name      string
	Load      LoadOptions // URL, Phase and Progress are set by RunPhase
	Faults    FaultRates
	ProxySeed uint64
	// RedisFaults, when set, pauses Redis (SIGSTOP) for Pause once a
	// quarter of the calls have ended, and kills it (SIGKILL) once half
	// have, restarting it Down later with its append-only file.
	RedisFaults bool
	Pause, Down time.Duration
	// NoRedelivery skips sending every keyed write once more after the
	// load: toward servers without the middleware (ServerOptions.Bare)
	// it would apply each a second time, by the harness's own doing.
	NoRedelivery bool
}

// Event is something done to Redis during a phase.
type Event struct {
	What string
	At   time.Duration // since the load started
}

// PhaseResult is a phase's figures.
type PhaseResult struct {
	Options PhaseOptions
	Load    *LoadResult
	Proxy   [numFaults]int64
	Events  []Event
	// Redelivered is how the keyed writes ended when sent once more after
	// the load, straight to the servers; Rounds the rounds that took (a key
	// still in flight, its result not yet recorded, or answered 503, the
	// ledger's call having timed out, is sent again a second later, up to
	// 10 times).
	Redelivered [numOutcomes]int
	Rounds      int
	// Applied is how many times the servers applied each write of the
	// phase (keyed by its key, unkeyed by its id), after the redelivery;
	// AppliedBefore the same before it.
	Applied, AppliedBefore map[string]int
}

// RunPhase runs one phase against f.
func RunPhase(f *Fleet, o PhaseOptions) (*PhaseResult, error) {
	p, err := StartProxy(f.Servers.Addrs(), o.Faults, o.ProxySeed)
	if err != nil {
		return nil, err
	}
	res := &PhaseResult{Options: o}
	lo := o.Load
	lo.URL, lo.Phase = p.URL(), o.Name
	quarter, half := make(chan struct{}), make(chan struct{})
	var quartered, halved sync.Once
	lo.Progress = func(n int) {
		if n >= lo.Calls/4 {
			quartered.Do(func() { close(quarter) })
		}
		if n >= lo.Calls/2 {
			halved.Do(func() { close(half) })
		}
	}
	var (
		start    = time.Now()
		faultErr error
		wg       sync.WaitGroup
	)
	if o.RedisFaults {
		wg.Go(func() {
			event := func(what string) { res.Events = append(res.Events, Event{what, time.Since(start)}) }
			<-quarter
			f.Redis.Pause()
			event("paused (SIGSTOP)")
			wait(o.Pause)
			f.Redis.Resume()
			event("resumed (SIGCONT)")
			<-half
			f.Redis.Kill()
			event("killed (SIGKILL)")
			wait(o.Down)
			faultErr = f.Redis.Restart()
			event("restarted, its append-only file reloaded")
		})
	}
	res.Load, err = Load(lo)
	quartered.Do(func() { close(quarter) }) // a load too short to reach them
	halved.Do(func() { close(half) })
	wg.Wait()
	p.Close() // no stalled request arrives late from now on
	res.Proxy = p.Counts()
	if err = errors.Join(err, faultErr); err != nil {
		return nil, err
	}
	if res.AppliedBefore, err = f.phaseEffects(o.Name); err != nil {
		return nil, err
	}
	if !o.NoRedelivery {
		if err := res.redeliver(f.Servers.Addrs()); err != nil {
			return nil, err
		}
	}
	if res.Applied, err = f.phaseEffects(o.Name); err != nil {
		return nil, err
	}
	return res, nil
}

// wait waits for d: faults are held for their length while the load runs.
func wait(d time.Duration) {
	t := time.NewTimer(d)
	<-t.C
}

// phaseEffects counts the effects of the phase's writes.
func (f *Fleet) phaseEffects(phase string) (map[string]int, error) {
	all, err := f.Servers.Effects()
	if err != nil {
		return nil, err
	}
	n := map[string]int{}
	for line, c := range all {
		_, id, _ := strings.Cut(line, " ")
		if strings.HasPrefix(id, phase+"-") {
			n[id] += c
		}
	}
	return n, nil
}

// redeliver sends every key of the phase's keyed writes once more, in
// turn to each server, with a plain client (no retries), from 8
// goroutines; a key answered "in flight" or 503 goes again a second
// later.
func (r *PhaseResult) redeliver(addrs []string) error {
	seen := map[string]bool{}
	var keys []string
	for _, c := range r.Load.Calls {
		if c.Kind == KindKeyed && !seen[c.ID] {
			seen[c.ID] = true
			keys = append(keys, c.ID)
		}
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 8}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for r.Rounds = 1; ; r.Rounds++ {
		outs := make([]Outcome, len(keys))
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		next := 0
		for range 8 {
			wg.Go(func() {
				for {
					mu.Lock()
					i := next
					next++
					mu.Unlock()
					if i >= len(keys) {
						return
					}
					req, err := http.NewRequest(http.MethodPost, "http://"+addrs[i%len(addrs)]+pathCharges, bytes.NewReader(chargeBody(keys[i])))
					var resp *http.Response
					if err == nil {
						req.Header.Set("Idempotency-Key", keys[i])
						resp, err = client.Do(req)
					}
					if err != nil {
						mu.Lock()
						firstErr = cmpOr(firstErr, fmt.Errorf("redelivering %s: %w", keys[i], err))
						mu.Unlock()
						return
					}
					outs[i], _ = classify(resp, nil)
				}
			})
		}
		wg.Wait()
		if firstErr != nil {
			return firstErr
		}
		var again []string
		for i, o := range outs {
			if (o == OutInFlight || o == OutUnavailable) && r.Rounds < 10 {
				again = append(again, keys[i])
				continue
			}
			r.Redelivered[o]++
		}
		if len(again) == 0 {
			return nil
		}
		keys = again
		wait(time.Second)
	}
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
