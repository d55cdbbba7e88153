package idempg_test

import (
	"context"
	"testing"

	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemseq"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/internal/testsvc"
)

func TestSeqTrackerSuite(t *testing.T) {
	t.Parallel()
	idemtest.SeqSuite(t, idemtest.SeqHarness{MaxSteps: 30, New: func(t *testing.T, cfg idemseq.Config) idemseq.Tracker {
		tr, err := idempg.NewSeqTracker(context.Background(), testsvc.PostgresPool(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}})
}

// TestSeqTrackerCheckTx: the number commits and rolls back with the caller's pgx.Tx.
func TestSeqTrackerCheckTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testsvc.PostgresPool(t)
	tr, err := idempg.NewSeqTracker(ctx, pool, idemseq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	check := func(commit bool) idemseq.Verdict {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		v, err := tr.CheckTx(ctx, tx, "p", 1, 42)
		if err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return v
	}
	if v := check(false); v != idemseq.Accepted {
		t.Fatalf("first check = %v", v)
	}
	if v := check(true); v != idemseq.Accepted {
		t.Fatalf("check after a rollback = %v, want accepted", v)
	}
	if v := check(true); v != idemseq.Duplicate {
		t.Fatalf("check after a commit = %v, want duplicate", v)
	}
}
