module github.com/retryfuse/retryfuse/integrations

go 1.26.0

require (
	github.com/retryfuse/retryfuse v0.0.0
	github.com/stretchr/testify v1.12.1
	github.com/stripe/stripe-go/v82 v82.5.1
	go.uber.org/goleak v1.3.0
)

require (
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/net v0.43.0 // indirect
)

replace github.com/retryfuse/retryfuse => ../
