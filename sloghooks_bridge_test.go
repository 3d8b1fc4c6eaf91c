package retryfuse_test

import (
	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/sloghooks"
)

// The package's own tests log through sloghooks.New (SloghooksNew in
// export_test.go) but cannot import it: sloghooks imports the package.
// This file, of the external test package, hands it to them; the package's
// variables are initialised before this init, and tests run after it.
func init() { retryfuse.SloghooksNew = sloghooks.New }
