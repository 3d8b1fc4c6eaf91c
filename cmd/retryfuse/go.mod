module github.com/retryfuse/retryfuse/cmd/retryfuse

go 1.26.0

require (
	github.com/hashicorp/go-cleanhttp v0.5.2
	github.com/retryfuse/retryfuse v0.1.0
	github.com/retryfuse/retryfuse/sql v0.1.0
	github.com/stretchr/testify v1.12.1
	modernc.org/sqlite v1.62.0
)
