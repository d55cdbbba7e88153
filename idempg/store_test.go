package idempg_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemtest"
	"github.com/jackc/pgx/v5"
)

// offline makes New do no I/O, so a store can point at a server that is not there.
var offline = idempg.Offline(idempg.Config{})

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestStoreConformance(t *testing.T) {
	t.Parallel()
	harnesses := map[string]idemtest.Harness{
		"pgx": {
			New: func(t *testing.T) idem.Store { s, _ := newStore(t, idempg.Config{}); return s },
			Unreachable: func(t *testing.T) idem.Store {
				s, err := idempg.New(ctxFor(t), unreachablePool(t), offline)
				check(t, err)
				return s
			},
		},
		"database_sql": {
			New: func(t *testing.T) idem.Store { s, _ := newSQLStore(t, idempg.Config{}); return s },
			Unreachable: func(t *testing.T) idem.Store {
				s, err := idempg.NewSQL(ctxFor(t), unreachableDB(t), offline)
				check(t, err)
				return s
			},
		},
	}
	for name, h := range harnesses {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			idemtest.StoreSuite(t, h)
		})
	}
}

const ordersDDL = `CREATE TABLE orders (id text NOT NULL)`

func TestTxStoreConformance(t *testing.T) {
	t.Parallel()
	idemtest.TxStoreSuite(t, func(t *testing.T) idemtest.TxEnv[pgx.Tx] {
		s, pool := newStore(t, idempg.Config{})
		if _, err := pool.Exec(ctxFor(t), ordersDDL); err != nil {
			t.Fatal(err)
		}
		return idemtest.TxEnv[pgx.Tx]{
			Store:    s,
			Begin:    pool.Begin,
			Commit:   func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) },
			Rollback: func(ctx context.Context, tx pgx.Tx) error { return tx.Rollback(ctx) },
			InsertEffect: func(ctx context.Context, tx pgx.Tx, id string) error {
				_, err := tx.Exec(ctx, "INSERT INTO orders (id) VALUES ($1)", id)
				return err
			},
			CountEffects: func(ctx context.Context, id string) (n int, err error) {
				err = pool.QueryRow(ctx, "SELECT count(*) FROM orders WHERE id = $1", id).Scan(&n)
				return n, err
			},
		}
	})
}

func TestSQLTxStoreConformance(t *testing.T) {
	t.Parallel()
	idemtest.TxStoreSuite(t, func(t *testing.T) idemtest.TxEnv[*sql.Tx] {
		s, db := newSQLStore(t, idempg.Config{})
		return idemtest.SQLTxEnv(t, db, s)
	})
}

func TestNilTx(t *testing.T) {
	t.Parallel()
	s, err := idempg.New(ctxFor(t), unreachablePool(t), offline)
	check(t, err)
	k := idem.Key{Scope: "s", ID: "k"}
	if _, err := s.ClaimTx(ctxFor(t), nil, idem.Claim{Key: k}); !errors.Is(err, idem.ErrInvalid) {
		t.Fatalf("ClaimTx(nil tx) = %v, want ErrInvalid", err)
	}
	if err := s.CompleteTx(ctxFor(t), nil, k, 1, nil); !errors.Is(err, idem.ErrInvalid) {
		t.Fatalf("CompleteTx(nil tx) = %v, want ErrInvalid", err)
	}
}

// A sweep deletes the row; the sequence still keeps the next token above it.
func TestTokenRisesAfterSweep(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, idempg.Config{})
	ctx := ctxFor(t)
	c := idem.Claim{Key: idem.Key{Scope: "s", ID: "k"}, Lease: time.Millisecond}
	first, err := s.Claim(ctx, c)
	if err != nil || first.Outcome != idem.Acquired {
		t.Fatalf("Claim = %v, %v", first.Outcome, err)
	}
	time.Sleep(5 * time.Millisecond)
	if n, err := s.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1", n, err)
	}
	second, err := s.Claim(ctx, c)
	if err != nil || second.Outcome != idem.Acquired || second.Token <= first.Token {
		t.Fatalf("claim after sweep = %v token %d, %v; want Acquired above %d", second.Outcome, second.Token, err, first.Token)
	}
}

// Sweep repeats its statement until a batch comes back short.
func TestSweepInBatches(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, idempg.Config{SweepBatch: 3})
	ctx := ctxFor(t)
	claims := make([]idem.Claim, 10)
	for i := range claims {
		claims[i] = idem.Claim{Key: idem.Key{Scope: "s", ID: fmt.Sprint(i)}, Lease: time.Millisecond}
	}
	if _, err := s.ClaimBatch(ctx, claims); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if n, err := s.Sweep(ctx); err != nil || n != len(claims) {
		t.Fatalf("Sweep = %d, %v; want %d", n, err, len(claims))
	}
}

// Two batches over the same fresh keys in opposite orders: without a fixed lock
// order, their implicit transactions deadlock.
func TestClaimBatchOppositeOrders(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, idempg.Config{})
	ctx := ctxFor(t)
	const rounds, width = 30, 6
	var wg sync.WaitGroup
	errs := make(chan error, 2*rounds)
	for dir := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				claims := make([]idem.Claim, width)
				for i := range width {
					j := i
					if dir == 1 {
						j = width - 1 - i
					}
					claims[i] = idem.Claim{Key: idem.Key{Scope: "s", ID: fmt.Sprintf("r%d-k%d", r, j)}}
				}
				if _, err := s.ClaimBatch(ctx, claims); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestClaimBatchEmpty(t *testing.T) {
	t.Parallel()
	s, err := idempg.New(ctxFor(t), unreachablePool(t), offline)
	check(t, err)
	got, err := s.ClaimBatch(ctxFor(t), nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("ClaimBatch(nil) = %v, %v; want no results and no round trip", got, err)
	}
}

// A claim waiting for another transaction's row gives up with the caller's context,
// and the error still matches context.DeadlineExceeded.
func TestClaimTxWaitRespectsContext(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t, idempg.Config{})
	ctx := ctxFor(t)
	c := idem.Claim{Key: idem.Key{Scope: "s", ID: "held"}}
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if res, err := s.ClaimTx(ctx, holder, c); err != nil || res.Outcome != idem.Acquired {
		t.Fatalf("ClaimTx = %v, %v", res.Outcome, err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = s.Claim(waitCtx, c)
	var be *idem.BackendError
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &be) || be.Op != "claim" {
		t.Fatalf("Claim blocked past its deadline = %v, want a claim *idem.BackendError matching DeadlineExceeded", err)
	}
}

// The longest durations a Claim accepts fit Postgres's timestamps and intervals.
func TestLongestDurations(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, idempg.Config{})
	ctx := ctxFor(t)
	c := idem.Claim{Key: idem.Key{Scope: "s", ID: "forever"}, Lease: math.MaxInt64, Retention: math.MaxInt64}
	res, err := s.Claim(ctx, c)
	if err != nil || res.Outcome != idem.Acquired {
		t.Fatalf("Claim = %v, %v", res.Outcome, err)
	}
	if err := s.Complete(ctx, c.Key, res.Token, []byte("r")); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if rep, err := s.Claim(ctx, c); err != nil || rep.Outcome != idem.Replayed {
		t.Fatalf("Claim after Complete = %v, %v; want Replayed", rep.Outcome, err)
	}
}
