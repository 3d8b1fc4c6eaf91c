package retryfusesql

import "time"

// setClock makes every statement of l take its time from now instead of
// the database's clock.
func (l *Ledger) setClock(now func() time.Time) { l.clock = now }
