package fleet

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/idempotency"
)

// This file is the callers: one retryfuse.Transport, shared by every
// caller as a service shares it, and the calls they make through it.

// ClientOptions are the Transport's settings under test.
type ClientOptions struct {
	// Declared sets Keys.ServerHonours; false leaves Keys.HonourMemory at its
	// default, so that the Transport learns it from the servers' marker,
	// unless Unaware sets HonourMemory negative: the client as it was
	// before servers could honour keys, which never repeats an uncertain
	// write.
	Declared, Unaware bool
	MaxAttempts       int
	AttemptTimeout    time.Duration
	// BudgetRatio is the retry budget's RatioBudgetConfig.Ratio; 0 is the
	// Transport's default budget (Ratio 0.1).
	BudgetRatio float64
	// Throttle leaves the Transport's throttle of new calls at its
	// default (on); false turns it off (DisableThrottle).
	Throttle bool
}

// Mix is the shares of the kinds of calls: Keyed and Unkeyed writes, and
// GETs for the rest; Resend of the keyed writes re-send a key sent before.
type Mix struct{ Keyed, Unkeyed, Resend float64 }

// LoadOptions are the settings of one load.
type LoadOptions struct {
	URL         string // the proxy's
	Phase       string // in every key and note id: each load's are its own
	Calls       int
	Callers     int
	Seed        uint64
	Mix         Mix
	Client      ClientOptions
	CallTimeout time.Duration // each call's deadline
	// Progress, when set, is told the number of calls ended after each.
	Progress func(ended int)
}

// Call is one call and how it ended.
type Call struct {
	Kind       Kind
	ID         string // the key of a keyed write, the id of a note; empty for a GET
	Outcome    Outcome
	Detail     string // the cause of a reconcile; what an unexpected outcome was
	Start, End time.Time
	// Trail is how each attempt ended (a status, "replay", or the error's
	// kind: "attempt timeout", "connection reset", "EOF"), and why the
	// call stopped repeating, if it gave up ("stopped: ...").
	Trail []string
}

// trailKey carries a call's *Call in its request's context, for the hooks.
type trailKey struct{}

// giveUpName is why a call stopped repeating, in a few words.
func giveUpName(err error) string {
	switch {
	case errors.Is(err, retryfuse.ErrBudgetExhausted):
		return "retry budget exhausted"
	case errors.Is(err, retryfuse.ErrAttemptsExhausted):
		return "attempts exhausted"
	}
	return err.Error()
}

// attemptSummary is how an attempt ended, in a word.
func attemptSummary(i retryfuse.AttemptDoneInfo) string {
	switch {
	case i.Replayed:
		return "replay"
	case i.StatusCode != 0:
		return strconv.Itoa(i.StatusCode)
	}
	return causeName(i.Err)
}

// LoadResult is what the callers saw.
type LoadResult struct {
	Calls []Call
	// FirstMarker is when a caller first got a response carrying the
	// servers' marker, Idempotency-Key-Honoured: ?1 (zero: never). The
	// Transport had learnt it by then.
	FirstMarker time.Time
	// Attempts, Retries, Replays (attempts answered by a replay) and
	// HiddenResends (requests net/http re-sent by itself) count what the
	// Transport reported through its hooks.
	Attempts, Retries, Replays, HiddenResends int64
	Start                                     time.Time
	Took                                      time.Duration
}

// chargeBody is the body of the charge under key: the same for every
// request under it.
func chargeBody(key string) []byte {
	return []byte(`{"order":"` + key + `","amount":4200,"currency":"EUR"}`)
}

// Load makes o.Calls calls from o.Callers goroutines through one
// Transport, and returns how each ended.
func Load(o LoadOptions) (*LoadResult, error) {
	res := &LoadResult{Calls: make([]Call, o.Calls)}
	var attempts, retries, replays, hidden atomic.Int64
	base := &http.Transport{MaxIdleConnsPerHost: 2 * o.Callers, IdleConnTimeout: 30 * time.Second, DisableCompression: true}
	defer base.CloseIdleConnections()
	tr := &retryfuse.Transport{
		Base: base,
		Retry: retryfuse.RetryPolicy{
			MaxAttempts:    o.Client.MaxAttempts,
			AttemptTimeout: o.Client.AttemptTimeout,
		},
		Keys: retryfuse.KeyPolicy{
			ServerHonours: o.Client.Declared,
		},
		Load: retryfuse.LoadPolicy{
			Throttle: retryfuse.ThrottlePolicy{
				Disable: !o.Client.Throttle,
			},
		},
		Hooks: retryfuse.Hooks{
			AttemptStart: func(retryfuse.AttemptStartInfo) { attempts.Add(1) },
			Retry:        func(retryfuse.RetryInfo) { retries.Add(1) },
			AttemptDone: func(i retryfuse.AttemptDoneInfo) {
				if i.Replayed {
					replays.Add(1)
				}
				if c, ok := i.Context.Value(trailKey{}).(*Call); ok {
					c.Trail = append(c.Trail, attemptSummary(i)) // the call's attempts are one after another
				}
			},
			HiddenResend: func(retryfuse.AttemptDoneInfo) { hidden.Add(1) },
			GiveUp: func(i retryfuse.GiveUpInfo) {
				if c, ok := i.Context.Value(trailKey{}).(*Call); ok {
					c.Trail = append(c.Trail, "stopped: "+giveUpName(i.Reason))
				}
			},
		},
	}
	if o.Client.Unaware {
		tr.Keys.HonourMemory = -1
	}
	if r := o.Client.BudgetRatio; r > 0 {
		tr.Retry.NewBudget = func(string) (budget.Budget, error) {
			return budget.NewRatio(budget.RatioConfig{Ratio: r})
		}
	}
	if err := tr.Validate(); err != nil {
		return nil, err
	}
	client := &http.Client{Transport: tr}

	var (
		next, ended atomic.Int64
		marker      atomic.Int64 // UnixNano of the first marker seen
		mu          sync.Mutex
		sent        []string // keys whose first call ended, for re-sends
	)
	start := time.Now()
	var wg sync.WaitGroup
	for range o.Callers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < o.Calls; i = int(next.Add(1) - 1) {
				rng := rand.New(rand.NewPCG(o.Seed, uint64(i)))
				c := &res.Calls[i]
				c.Kind = pickKind(rng, o.Mix)
				if c.Kind == KindResend {
					mu.Lock()
					if len(sent) == 0 {
						c.Kind = KindKeyed
					} else {
						c.ID = sent[rng.IntN(len(sent))]
					}
					mu.Unlock()
				}
				ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), trailKey{}, c), o.CallTimeout)
				req := newRequest(ctx, o.URL, o.Phase, i, c)
				c.Start = time.Now()
				resp, err := client.Do(req)
				if err == nil && resp.Header.Get(idempotency.HeaderHonoured) == "?1" {
					marker.CompareAndSwap(0, time.Now().UnixNano())
				}
				c.Outcome, c.Detail = classify(resp, err)
				c.End = time.Now()
				cancel()
				if c.Kind == KindKeyed {
					mu.Lock()
					sent = append(sent, c.ID)
					mu.Unlock()
				}
				n := ended.Add(1)
				if o.Progress != nil {
					o.Progress(int(n))
				}
			}
		})
	}
	wg.Wait()
	res.Start, res.Took = start, time.Since(start)
	if m := marker.Load(); m != 0 {
		res.FirstMarker = time.Unix(0, m)
	}
	res.Attempts, res.Retries, res.Replays, res.HiddenResends = attempts.Load(), retries.Load(), replays.Load(), hidden.Load()
	return res, nil
}

func pickKind(rng *rand.Rand, m Mix) Kind {
	switch x := rng.Float64(); {
	case x < m.Keyed*m.Resend:
		return KindResend
	case x < m.Keyed:
		return KindKeyed
	case x < m.Keyed+m.Unkeyed:
		return KindUnkeyed
	}
	return KindGet
}

// newRequest builds call i's request, and names c's key or note.
func newRequest(ctx context.Context, url, phase string, i int, c *Call) *http.Request {
	var req *http.Request
	switch c.Kind {
	case KindKeyed, KindResend:
		if c.ID == "" {
			c.ID = phase + "-order-" + strconv.Itoa(i)
		}
		req, _ = http.NewRequestWithContext(ctx, http.MethodPost, url+pathCharges, bytes.NewReader(chargeBody(c.ID)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", c.ID)
	case KindUnkeyed:
		c.ID = phase + "-note-" + strconv.Itoa(i)
		req, _ = http.NewRequestWithContext(ctx, http.MethodPost, url+pathNotes, strings.NewReader(c.ID))
		req.Header.Set("Content-Type", "text/plain")
	default:
		req, _ = http.NewRequestWithContext(ctx, http.MethodGet, url+pathCharges+"/ch_"+strconv.Itoa(i), nil)
	}
	return req
}
