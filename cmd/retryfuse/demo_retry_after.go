package main

import (
	"context"
	"net/http"
	"time"

	"github.com/retryfuse/retryfuse"
)

// retryAfterResults: a 503 asking the caller to come back in an hour.
type retryAfterResults struct {
	Deadline     time.Duration // the caller's deadline, on both sides
	PlainElapsed time.Duration // until the plain loop handed back control
	FuseElapsed  time.Duration // until retryfuse did
	PlainOutcome string
	FuseOutcome  string
	PlainSent    int64 // requests the server received from each side
	FuseSent     int64
	// FuseReason is the reason retryfuse reported (GiveUp hook) for not
	// retrying: ErrRetryAfterTooLong.
	FuseReason error
}

// runRetryAfter calls a server that answers 503 with Retry-After: 3600,
// under the caller's deadline cfg.deadline.
func runRetryAfter(srv *servers, cfg demoConfig) (retryAfterResults, error) {
	res := retryAfterResults{Deadline: cfg.deadline}
	plainDep := &failing{retryAfter: "3600"}
	fuseDep := &failing{retryAfter: "3600"}
	plainSrv, err := srv.start("Retry-After (plain)", plainDep)
	if err != nil {
		return res, err
	}
	fuseSrv, err := srv.start("Retry-After (retryfuse)", fuseDep)
	if err != nil {
		return res, err
	}

	plain := srv.newPlain(demoAttemptTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.deadline)
	began := time.Now()
	resp, err := plain.do(ctx, getter(plainSrv.URL))
	res.PlainElapsed = time.Since(began)
	cancel()
	res.PlainOutcome = describe(resp, err)
	drainClose(resp)
	res.PlainSent = plainDep.requests.Load()

	fuse := srv.newFuse(demoAttemptTimeout)
	fuse.Hooks.GiveUp = func(g retryfuse.GiveUpInfo) { res.FuseReason = g.Reason }
	client := &http.Client{Transport: fuse}
	ctx, cancel = context.WithTimeout(context.Background(), cfg.deadline)
	defer cancel()
	req, err := getter(fuseSrv.URL)(ctx)
	if err != nil {
		return res, err
	}
	began = time.Now()
	resp, err = client.Do(req)
	res.FuseElapsed = time.Since(began)
	res.FuseOutcome = describe(resp, err)
	drainClose(resp)
	res.FuseSent = fuseDep.requests.Load()
	return res, nil
}
