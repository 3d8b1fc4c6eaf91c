package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/idempotency"
)

// This file is how a call ended, as its caller sees it.

// Kind is the kind of a call.
type Kind int

const (
	KindKeyed   Kind = iota // POST /charges under a new Idempotency-Key, a replayable body
	KindResend              // POST /charges under a key sent before, the same body: a caller's own repeat
	KindUnkeyed             // POST /notes without a key
	KindGet                 // GET /charges/{id}
	numKinds
)

var kindNames = [numKinds]string{"keyed write", "keyed write re-sent by its caller", "unkeyed write", "GET"}

func (k Kind) String() string { return kindNames[k] }

// Outcome is how a call ended for its caller.
type Outcome int

const (
	OutApplied          Outcome = iota // 2xx, the body read whole
	OutReplayed                        // 2xx marked Idempotent-Replayed: the stored response of the key's first run
	OutBodyCut                         // 2xx, and the body broke off while it was read
	OutOutcomeUnknown                  // 409 ProblemOutcomeUnknown: an earlier run under the key has no recorded result
	OutInFlight                        // 409 ProblemInFlight, the last attempt's: the key's first run was still unsettled
	OutUnavailable                     // 503 after the last attempt: the ledger (or the proxy) could not answer
	OutOtherStatus                     // any other status
	OutStatusCut                       // any other status, and the body broke off while it was read
	OutReconcile                       // *ReconcileRequiredError: the outcome is uncertain and was not repeated
	OutReconcileEarlier                // *ReconcileRequiredError, Earlier: not sent, the key was left uncertain before
	OutConflict                        // ErrIdempotencyConflict
	OutBudget                          // ErrBudgetExhausted: no retry left in the budget, and no response
	OutAttempts                        // ErrAttemptsExhausted or ErrFailureStreak: the attempts ran out, and no response
	OutDeadline                        // the call's deadline
	OutOtherError                      // any other error
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"applied (2xx)", "replayed (2xx, Idempotent-Replayed)", "2xx, body cut",
	"409 outcome unknown", "409 in flight", "503", "other status", "other status, body cut", "*ReconcileRequiredError",
	"*ReconcileRequiredError (earlier call uncertain)", "ErrIdempotencyConflict", "ErrBudgetExhausted", "ErrAttemptsExhausted or ErrFailureStreak",
	"deadline", "other error"}

func (o Outcome) String() string { return outcomeNames[o] }

// classify reads resp whole (and closes it) or classifies err. detail
// names what an unexpected outcome was.
func classify(resp *http.Response, err error) (o Outcome, detail string) {
	if err != nil {
		var rre *retryfuse.ReconcileRequiredError
		switch {
		case errors.As(err, &rre) && rre.Earlier:
			return OutReconcileEarlier, ""
		case errors.As(err, &rre):
			return OutReconcile, causeName(rre.Cause) + " after " + counted(rre.Attempts, "attempt")
		case errors.Is(err, retryfuse.ErrIdempotencyConflict):
			return OutConflict, ""
		case errors.Is(err, retryfuse.ErrBudgetExhausted):
			return OutBudget, ""
		case errors.Is(err, retryfuse.ErrAttemptsExhausted), errors.Is(err, retryfuse.ErrFailureStreak):
			return OutAttempts, causeName(err)
		case errors.Is(err, context.DeadlineExceeded):
			return OutDeadline, ""
		}
		return OutOtherError, err.Error()
	}
	defer resp.Body.Close()
	body, rerr := io.ReadAll(resp.Body)
	switch s := resp.StatusCode; {
	case s >= 200 && s < 300 && rerr != nil:
		return OutBodyCut, ""
	case s >= 200 && s < 300 && resp.Header.Get(idempotency.HeaderReplayed) == "true":
		return OutReplayed, ""
	case s >= 200 && s < 300:
		return OutApplied, ""
	case s == http.StatusConflict && problemType(body) == idempotency.ProblemOutcomeUnknown:
		return OutOutcomeUnknown, ""
	case s == http.StatusConflict && problemType(body) == idempotency.ProblemInFlight:
		return OutInFlight, ""
	case rerr != nil:
		return OutStatusCut, strconv.Itoa(s)
	case s == http.StatusServiceUnavailable:
		return OutUnavailable, ""
	}
	return OutOtherStatus, fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
}

// causeName is a short name of an uncertain attempt's error.
func causeName(err error) string {
	switch {
	case err == nil:
		return "none"
	case errors.Is(err, retryfuse.ErrAttemptTimeout):
		return "attempt timeout"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "EOF"
	case strings.Contains(err.Error(), "connection reset"):
		return "connection reset"
	}
	return err.Error()
}

func problemType(body []byte) string {
	var p struct{ Type string }
	_ = json.Unmarshal(body, &p)
	return p.Type
}

func counted(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
