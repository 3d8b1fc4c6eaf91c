//go:build !race

package fingerprint

import (
	"net/http"
	"testing"
)

// The race detector changes what allocates: this runs without it.

func TestBindAllocatesNothing(t *testing.T) {
	c := mustCredentials(t, []string{"Authorization"}, []string{"sid"}, nil)
	h := http.Header{"Authorization": {"Bearer A"}, "Cookie": {"a=1; sid=s"}}
	c.Bind([32]byte{}, h, 0) // the pool's first hash
	if n := testing.AllocsPerRun(100, func() { c.Bind([32]byte{}, h, 0) }); n != 0 {
		t.Errorf("%v allocations per Bind, want 0", n)
	}
}
