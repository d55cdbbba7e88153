package idemsqlite_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/idemtest"
)

// Two processes on one database file, each with its own clock (Config.Now): the
// store takes its callers' clock, so their skew shortens or lengthens the other's
// leases and retention by exactly the skew (idemtest.SkewSuite).
func TestClockSkewBetweenNodes(t *testing.T) {
	t.Parallel()
	idemtest.SkewSuite(t, idemtest.SkewHarness{
		Nodes: func(t *testing.T, nowA, nowB func() time.Time) (idem.Store, idem.Store) {
			a, path := openStore(t, idemsqlite.Config{Now: nowA})
			b, err := idemsqlite.Open(context.Background(), path, idemsqlite.Config{Now: nowB})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return a, b
		},
	})
}
