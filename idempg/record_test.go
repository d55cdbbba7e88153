package idempg_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/internal/testsvc"
)

func record(t *testing.T, pool interface {
	Begin(context.Context) (pgx.Tx, error)
}, s *idempg.Store, commit bool, claims ...idem.Claim) []idem.Outcome {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	out, err := s.RecordTx(ctx, tx, claims)
	if err != nil {
		t.Fatal(err)
	}
	if commit {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestRecordTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testsvc.PostgresPool(t)
	s, err := idempg.New(ctx, pool, idempg.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := func(id, fp string) idem.Claim {
		return idem.Claim{Key: idem.Key{Scope: "inbox", ID: id}, Fingerprint: []byte(fp)}
	}
	A, R, M := idem.Acquired, idem.Replayed, idem.Mismatch

	if got := record(t, pool, s, false, c("a", "1"), c("b", "1")); !slices.Equal(got, []idem.Outcome{A, A}) {
		t.Fatalf("fresh keys = %v, want acquired", got)
	}
	// Rolled back: nothing recorded. Repeats in one batch: first acquired, then replayed
	// (same fingerprint) or mismatch (another).
	if got := record(t, pool, s, true, c("b", "1"), c("a", "1"), c("a", "1"), c("a", "2")); !slices.Equal(got, []idem.Outcome{A, A, R, M}) {
		t.Fatalf("after a rollback, with repeats = %v, want [A A R M]", got)
	}
	if got := record(t, pool, s, true, c("a", "1"), c("b", "2"), c("new", "")); !slices.Equal(got, []idem.Outcome{R, M, A}) {
		t.Fatalf("after a commit = %v, want [replayed mismatch acquired]", got)
	}
	// A key recorded by RecordTx replays through the plain Claim API too.
	if res, err := s.Claim(ctx, c("a", "1")); err != nil || res.Outcome != R {
		t.Fatalf("Claim of a recorded key = %v, %v; want replayed", res.Outcome, err)
	}
	// An expired record (retention 1µs) is taken over.
	exp := c("short", "")
	exp.Retention = time.Microsecond
	record(t, pool, s, true, exp)
	time.Sleep(5 * time.Millisecond)
	if got := record(t, pool, s, true, exp); !slices.Equal(got, []idem.Outcome{A}) {
		t.Fatalf("expired record = %v, want acquired", got)
	}
}

// TestRecordTxConcurrent: 8 transactions record overlapping batches (in different
// orders) and commit: each key is Acquired by exactly one, without deadlocks.
func TestRecordTxConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testsvc.PostgresPool(t)
	s, err := idempg.New(ctx, pool, idempg.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const keys = 200
	var mu sync.Mutex
	acquired := map[string]int{}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for start := 0; start < keys; start += 20 {
				var claims []idem.Claim
				for i := start + 19; i >= start; i-- { // each batch in reverse order
					claims = append(claims, idem.Claim{Key: idem.Key{Scope: "c", ID: string(rune('A'+i%26)) + string(rune('a'+i/26))}})
				}
				if g%2 == 1 {
					slices.Reverse(claims)
				}
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					out, err := s.RecordTx(ctx, tx, claims)
					if err != nil {
						return err
					}
					mu.Lock()
					defer mu.Unlock()
					for i, o := range out {
						if o == idem.Acquired {
							acquired[claims[i].Key.ID]++
						}
					}
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(acquired) != keys {
		t.Fatalf("%d keys acquired, want %d", len(acquired), keys)
	}
	for k, n := range acquired {
		if n != 1 {
			t.Fatalf("key %s acquired %d times", k, n)
		}
	}
}
