package retryfuseredis

import (
	"time"
)

// LedgerConfig configures a Ledger. Every zero value means the default
// given; a negative value is invalid.
type LedgerConfig struct {
	// Prefix is put before each idempotency key to make its Redis key (see
	// Ledger.Key). Empty means DefaultLedgerPrefix.
	Prefix string
	// TTL is how long a completed or uncertain key is kept, from Complete
	// or Uncertain, or from the expiry of a claim never ended. Zero means
	// 24h. Afterwards the key is free again.
	TTL time.Duration
	// InFlightTTL is how long an owner may hold a key, from Begin. Zero
	// means 5m. A claim not ended by then is uncertain for TTL, never free:
	// the request may have been applied and its result never recorded. Set
	// it above the longest a call (all its attempts and waits) may take.
	InFlightTTL time.Duration
	// MaxStoredBody bounds the bytes of body stored per completed key. Zero
	// means 64 KiB. A longer body, or headers of more than 100 values or
	// 32 KiB of names and values (the bounds of ledger.Memory),
	// complete the key without a stored result: a later call under the key
	// is not replayed, and the transport asks the caller to reconcile.
	MaxStoredBody int
	// Timeout bounds each Redis call; the caller's context deadline, when
	// sooner, bounds it too. Zero means DefaultTimeout (50ms).
	Timeout time.Duration

	// AllowWithoutPersistence lets NewLedger accept a Redis that keeps no
	// append-only file (appendonly no). Without persistence a restart
	// loses every record: the ledger notices and refuses keyed requests for
	// Quarantine, but cannot answer for the keys it held. False, the
	// default, makes NewLedger refuse such a Redis.
	AllowWithoutPersistence bool
	// Quarantine is how long Begin refuses every key (an error wrapping
	// ErrDataLost) once the ledger has noticed that Redis lost records:
	// a marker gone or gone back. Zero means InFlightTTL + TTL: by then
	// every key that was lost — completed, uncertain, or claimed by a call
	// still running — would have expired anyway, so nothing lost is taken
	// for free. A shorter one trades that guarantee for availability.
	Quarantine time.Duration
	// OnDataLost, when not nil, is called once per loss this process
	// notices, with an error wrapping ErrDataLost that says until when
	// keyed requests are refused. It must not block.
	OnDataLost func(err error)
	// OnQuarantineEnd, when not nil, is called when this process's
	// quarantine is ended deliberately (Ledger.EndQuarantine, here or in
	// another process), with who ended it, why and when. It must not
	// block.
	OnQuarantineEnd func(QuarantineEnd)

	// MaxPending bounds the Complete, Release and Uncertain calls, and the
	// cancellations of failed Begins, waiting to be retried in the
	// background while Redis cannot take them. Zero means 10000. One more
	// is not queued: it is reported to OnUnrecorded.
	MaxPending int
	// OnUnrecorded, when not nil, is called for each step that could not
	// be recorded in Redis and is given up: the queue was full, the key's
	// TTL passed, Close's deadline came, or Redis lost the key's record.
	// Such a key is not free: it stays in flight until InFlightTTL and is
	// then uncertain for TTL. It must not block.
	OnUnrecorded func(key string, err error)
}

func (c *LedgerConfig) validate() error {
	switch {
	case c.TTL < 0:
		return invalid("LedgerConfig.TTL", "must not be negative")
	case c.InFlightTTL < 0:
		return invalid("LedgerConfig.InFlightTTL", "must not be negative")
	case c.MaxStoredBody < 0:
		return invalid("LedgerConfig.MaxStoredBody", "must not be negative")
	case c.Quarantine < 0:
		return invalid("LedgerConfig.Quarantine", "must not be negative")
	case c.MaxPending < 0:
		return invalid("LedgerConfig.MaxPending", "must not be negative")
	}
	return nil
}
