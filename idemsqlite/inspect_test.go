package idemsqlite_test

import (
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/idemtest"
)

func TestInspectorSuite(t *testing.T) {
	t.Parallel()
	idemtest.InspectorSuite(t, func(t *testing.T) idem.Store {
		s, _ := openStore(t, idemsqlite.Config{})
		return s
	})
}
