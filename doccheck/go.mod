module github.com/retryfuse/retryfuse/doccheck

go 1.26.0

require (
	github.com/redis/go-redis/v9 v9.23.0
	github.com/retryfuse/retryfuse v0.1.0
	github.com/retryfuse/retryfuse/otel v0.1.0
	github.com/retryfuse/retryfuse/redis v0.1.0
	github.com/retryfuse/retryfuse/sql v0.1.0
	go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp v0.72.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/felixge/httpsnoop v1.1.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/time v0.16.0 // indirect
)
