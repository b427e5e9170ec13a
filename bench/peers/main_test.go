package peers

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// TestMain prints, before any benchmark result, one benchmark-format
// configuration line per implementation ("peer-<name>: <algorithm> |
// <module>"), so that the results generator (cmd/resultsmd) reads each
// implementation's algorithm from the measured output itself rather than
// from a copy that could drift.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		for _, im := range Impls() {
			mod := im.Module
			if mod == "" {
				mod = "bench/peers (this module)"
			}
			bound := "unbounded"
			if im.Bounded {
				bound = "bounded"
			}
			fmt.Printf("peer-%s: %s | %s | %s\n", im.Name, im.Algorithm, mod, bound)
		}
		for _, im := range MiddlewareImpls() {
			fmt.Printf("peer-%s: %s | %s | middleware\n", im.Name, im.Algorithm, im.Module)
		}
	}
	os.Exit(m.Run())
}
