package bench

import (
	"context"
	"net/http"
	"os"
	"testing"
)

func BenchmarkZZ(b *testing.B) {
	var rt http.RoundTripper
	for _, c := range instantClients(b) {
		if c.name == os.Getenv("ZZ") {
			rt = c.rt
		}
	}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://dependency.test/items", nil)
	instantCall(b, rt, req)
	b.ReportAllocs()
	for b.Loop() {
		instantCall(b, rt, req)
	}
}
