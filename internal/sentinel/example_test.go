package sentinel_test

import (
	"errors"
	"fmt"

	"github.com/retryfuse/retryfuse/internal/sentinel"
)

// An error made in a policy's package matches the root's exported
// sentinels, which are these very values.
func Example() {
	open := sentinel.Declined("retryfuse: circuit open")
	bad := sentinel.Finite("RatioConfig.Ratio", -0.5)
	fmt.Println(errors.Is(open, sentinel.ErrDeclined), errors.Is(open, sentinel.ErrInvalidPolicy))
	fmt.Println(errors.Is(bad, sentinel.ErrInvalidPolicy), errors.Is(bad, sentinel.ErrDeclined))
	fmt.Println(bad)
	// Output:
	// true false
	// true false
	// retryfuse: invalid policy: RatioConfig.Ratio is negative
}
