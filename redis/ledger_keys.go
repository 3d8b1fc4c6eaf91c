package retryfuseredis

import (
	"hash/fnv"
	"strconv"
)

// The ledger's keys are spread over ledgerBuckets hash tags. Each tag has
// a marker (ledger_guard.lua) in the same Redis Cluster slot as its
// records, so that every script checks the marker and touches the record
// in one slot; 64 tags spread the records over the masters of a cluster.
const ledgerBuckets = 64

// bucketOf returns the bucket of an idempotency key.
func bucketOf(key string) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % ledgerBuckets)
}

// bucketTag returns the hash tag of bucket b: "{" two hex digits "}".
func bucketTag(b int) string {
	s := strconv.FormatInt(int64(b), 16)
	if len(s) < 2 {
		s = "0" + s
	}
	return "{" + s + "}"
}

// markerKey returns the Redis key of bucket b's marker. No record key
// equals it: a record's key has ":" after the tag.
func (l *Ledger) markerKey(b int) string { return l.prefix + bucketTag(b) }
