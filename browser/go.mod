module github.com/retryfuse/retryfuse/browser

go 1.26.0

require (
	github.com/chromedp/chromedp v0.23.1
	github.com/retryfuse/retryfuse v0.1.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/chromedp/cdproto v0.160.1 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	golang.org/x/time v0.16.0 // indirect
)
