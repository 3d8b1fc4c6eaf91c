package ledger

import "time"

// CompleteCopyAt is Complete at the time now: res is stored as a copy.
func (l *Memory) CompleteCopyAt(key, token string, res *StoredResponse, now time.Time) error {
	return l.completeAt(key, token, res, now)
}
