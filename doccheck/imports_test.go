package doccheck

// The packages a block may name that are not the standard library's: imported
// here so that go.mod requires their modules and go.sum holds their sums.
import (
	_ "github.com/redis/go-redis/v9"
	_ "github.com/retryfuse/retryfuse"
	_ "github.com/retryfuse/retryfuse/breaker"
	_ "github.com/retryfuse/retryfuse/budget"
	_ "github.com/retryfuse/retryfuse/debugpage"
	_ "github.com/retryfuse/retryfuse/decide"
	_ "github.com/retryfuse/retryfuse/idempotency"
	_ "github.com/retryfuse/retryfuse/ledger"
	_ "github.com/retryfuse/retryfuse/ledger/ledgertest"
	_ "github.com/retryfuse/retryfuse/otel"
	_ "github.com/retryfuse/retryfuse/redis"
	_ "github.com/retryfuse/retryfuse/retryfusetest"
	_ "github.com/retryfuse/retryfuse/sloghooks"
	_ "github.com/retryfuse/retryfuse/sql"
	_ "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
)
