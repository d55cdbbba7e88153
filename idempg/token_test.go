package idempg_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A claim that waits behind a transaction which releases the key, claims it again
// and releases it again must still get a token above every token that transaction
// was given: tokens rise per key across incarnations, however the claims interleave.
// The waiter's token used to be drawn before it waited, so it came out below.
func TestTokenRisesAfterWaitingOnRelease(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	s, pool := newStore(t, idempg.Config{})
	k := idem.Key{Scope: "s", ID: "k"}
	c := idem.Claim{Key: k, Lease: time.Minute}

	first, err := s.Claim(ctx, c)
	check(t, err)
	wantAcquired(t, first)

	// The waiter claims on a connection of its own, so the test can see it wait.
	waiter, pid := singleConnStore(t, pool)

	tx, err := pool.Begin(ctx)
	check(t, err)
	defer tx.Rollback(ctx)
	check(t, s.ReleaseTx(ctx, tx, k, first.Token))

	type answer struct {
		res idem.Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := waiter.Claim(ctx, c)
		done <- answer{res, err}
	}()
	awaitLockWait(t, pool, pid)

	again, err := s.ClaimTx(ctx, tx, c)
	check(t, err)
	wantAcquired(t, again)
	check(t, s.ReleaseTx(ctx, tx, k, again.Token))
	check(t, tx.Commit(ctx))

	a := <-done
	check(t, a.err)
	wantAcquired(t, a.res)
	if a.res.Token <= again.Token {
		t.Fatalf("tokens of key %v: %d, then %d in the transaction, then %d for the claim that waited on it: not rising",
			k, first.Token, again.Token, a.res.Token)
	}
}

// The same interleaving through database/sql.
func TestTokenRisesAfterWaitingOnReleaseSQL(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	s, db := newSQLStore(t, idempg.Config{})
	k := idem.Key{Scope: "s", ID: "k"}
	c := idem.Claim{Key: k, Lease: time.Minute}

	first, err := s.Claim(ctx, c)
	check(t, err)
	wantAcquired(t, first)

	conn, err := db.Conn(ctx)
	check(t, err)
	defer conn.Close()
	var pid int
	check(t, conn.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid))

	tx, err := db.BeginTx(ctx, nil)
	check(t, err)
	defer tx.Rollback()
	check(t, s.ReleaseTx(ctx, tx, k, first.Token))

	type answer struct {
		res idem.Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		// A transaction on the watched connection, holding only the claim.
		wtx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			done <- answer{err: err}
			return
		}
		res, err := s.ClaimTx(ctx, wtx, c)
		if err == nil {
			err = wtx.Commit()
		} else {
			_ = wtx.Rollback()
		}
		done <- answer{res, err}
	}()
	awaitLockWaitSQL(t, db, pid)

	again, err := s.ClaimTx(ctx, tx, c)
	check(t, err)
	wantAcquired(t, again)
	check(t, s.ReleaseTx(ctx, tx, k, again.Token))
	check(t, tx.Commit())

	a := <-done
	check(t, a.err)
	wantAcquired(t, a.res)
	if a.res.Token <= again.Token {
		t.Fatalf("tokens of key %v: %d, then %d in the transaction, then %d for the claim that waited on it: not rising",
			k, first.Token, again.Token, a.res.Token)
	}
}

func wantAcquired(t *testing.T, res idem.Result) {
	t.Helper()
	if res.Outcome != idem.Acquired {
		t.Fatalf("outcome %v, want Acquired (record %+v)", res.Outcome, res.Record)
	}
}

// singleConnStore returns a store on a one-connection pool of pool's schema and the
// backend pid of that connection.
func singleConnStore(t *testing.T, pool *pgxpool.Pool) (*idempg.Store, int) {
	t.Helper()
	ctx := ctxFor(t)
	cfg := pool.Config()
	cfg.MinConns, cfg.MaxConns = 1, 1
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	check(t, err)
	t.Cleanup(p.Close)
	var pid int
	check(t, p.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	s, err := idempg.New(ctx, p, idempg.Config{SkipMigrate: true})
	check(t, err)
	return s, pid
}

const lockWaitSQL = `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`

// awaitLockWait returns once backend pid waits for a lock.
func awaitLockWait(t *testing.T, pool *pgxpool.Pool, pid int) {
	t.Helper()
	awaitWait(t, func(ctx context.Context) (n int, err error) {
		err = pool.QueryRow(ctx, lockWaitSQL, pid).Scan(&n)
		return n, err
	})
}

func awaitLockWaitSQL(t *testing.T, db *sql.DB, pid int) {
	t.Helper()
	awaitWait(t, func(ctx context.Context) (n int, err error) {
		err = db.QueryRowContext(ctx, lockWaitSQL, pid).Scan(&n)
		return n, err
	})
}

func awaitWait(t *testing.T, waiting func(context.Context) (int, error)) {
	t.Helper()
	ctx := ctxFor(t)
	for {
		n, err := waiting(ctx)
		check(t, err)
		if n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the concurrent claim never waited for the transaction's lock")
		case <-time.After(5 * time.Millisecond):
		}
	}
}
