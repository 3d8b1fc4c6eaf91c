package retryfuseredis

import (
	"context"
	"errors"
	"strconv"
)

// This file is the error of a ledger call, or of a budget's Close, whose
// caller's context had ended before it could reach Redis: nothing was
// sent, and Redis is not to blame.

// ErrContextEnded is wrapped by the error of a ledger call (Begin,
// Complete, Release, Uncertain) given a context that had already ended:
// nothing was sent to Redis. The error wraps the context's error too
// (context.DeadlineExceeded or context.Canceled, and its cause). It does
// not wrap ErrUnavailable: Redis is not to blame.
//
// A Complete, Release or Uncertain so refused is retried in the
// background at once, with a context of its own bounded by Timeout, and
// its error says so ("retried in the background"); when the queue is full
// or the ledger closed, it is not, and it is reported to OnUnrecorded.
// The transport runs these steps detached from the caller's cancellation,
// so they meet this error only when called directly.
//
// A budget's Close (RatioBudget, TokenBucket, Budgets) given a context
// that had already ended, with something left to send, wraps it too: it
// stops the budget's goroutine but sends nothing (see RatioBudget.Close).
var ErrContextEnded = errors.New("retryfuseredis: the caller's context had ended")

// contextEndedError is the error of a ledger call, or of a budget's Close,
// not sent because its context had ended.
type contextEndedError struct {
	call   string // "Begin", "Complete", "Release" or "Uncertain"; "Close" for a budget
	budget string // the budget's key, for a budget's Close; "" for the ledger
	err    error  // the context's error
	cause  error  // context.Cause, when it is not err
	queued bool   // retried in the background
}

// contextEnded returns the error of call, not sent because ctx had ended.
func contextEnded(ctx context.Context, call string) *contextEndedError {
	e := &contextEndedError{call: call, err: ctx.Err()}
	if cause := context.Cause(ctx); cause != e.err {
		e.cause = cause
	}
	return e
}

func (e *contextEndedError) Error() string {
	s := "retryfuseredis: ledger " + e.call + " not recorded"
	switch {
	case e.budget != "":
		s = "retryfuseredis: budget " + strconv.Quote(e.budget) + " closed without its last sync"
	case e.call == "Begin":
		s = "retryfuseredis: ledger Begin not sent"
	}
	s += ": the caller's context ended (" + e.err.Error()
	if e.cause != nil {
		s += ": " + e.cause.Error()
	}
	s += ")"
	if e.queued {
		s += "; retried in the background"
	}
	return s
}

func (e *contextEndedError) Unwrap() []error {
	if e.cause == nil {
		return []error{ErrContextEnded, e.err}
	}
	return []error{ErrContextEnded, e.err, e.cause}
}
