package main

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

// plainLoop is the retry loop typical code writes by hand. It is configured
// like the retryfuse side (attempts, backoff, per-attempt timeout) and
// behaves as such loops usually do: it retries any error and any 5xx,
// whatever the method, and honours a Retry-After by waiting as long as it
// says, bounded only by the caller's context.
type plainLoop struct {
	client         *http.Client
	attempts       int
	initialBackoff time.Duration
	maxBackoff     time.Duration
	attemptTimeout time.Duration
}

// do sends the request made by newReq until it gets a response below 500 or
// runs out of attempts. The response body is read within the attempt's
// timeout and handed back in memory.
func (p plainLoop) do(ctx context.Context, newReq func(context.Context) (*http.Request, error)) (*http.Response, error) {
	ceiling := p.initialBackoff
	for attempt := 1; ; attempt++ {
		resp, err := p.once(ctx, newReq)
		if err == nil && resp.StatusCode < 500 {
			return resp, nil
		}
		if attempt >= p.attempts || ctx.Err() != nil {
			return resp, err
		}
		delay := time.Duration(rand.Int64N(int64(ceiling)))
		ceiling = min(2*ceiling, p.maxBackoff)
		if resp != nil {
			if secs, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && secs > 0 {
				delay = max(delay, time.Duration(secs)*time.Second)
			}
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case <-timer.C:
		}
	}
}

// once makes one attempt under the per-attempt timeout.
func (p plainLoop) once(ctx context.Context, newReq func(context.Context) (*http.Request, error)) (*http.Response, error) {
	actx, cancel := context.WithTimeout(ctx, p.attemptTimeout)
	defer cancel()
	req, err := newReq(actx)
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}
