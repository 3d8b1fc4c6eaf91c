package retryfuseredis

import (
	"errors"
	"testing"

	"github.com/retryfuse/retryfuse/ledger"
)

// A reply of the inspect script that is not one (a proxy's, a script of
// another version) is an error an Inspector's caller recognises as the
// store failing to answer: ledger.ErrUnavailable, as the Inspector
// contract says, and this package's ErrUnavailable.
func TestInspectReplyNotAsWrittenIsLedgerUnavailable(t *testing.T) {
	l := &Ledger{}
	for _, v := range []any{nil, "OK", []any{int64(1), "f"}} {
		_, err := l.parseRecord("k", v)
		if !errors.Is(err, ledger.ErrUnavailable) || !errors.Is(err, ErrUnavailable) {
			t.Errorf("reply %#v: got %v, want an error wrapping ledger.ErrUnavailable and ErrUnavailable", v, err)
		}
	}
}
