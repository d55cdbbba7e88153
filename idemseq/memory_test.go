package idemseq_test

import (
	"testing"

	"github.com/idemhq/idem/idemseq"
	"github.com/idemhq/idem/idemtest"
)

func TestMemorySuite(t *testing.T) {
	t.Parallel()
	idemtest.SeqSuite(t, idemtest.SeqHarness{New: func(t *testing.T, cfg idemseq.Config) idemseq.Tracker {
		m, err := idemseq.NewMemory(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}})
}
