package drivertest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/migrate"
)

// Seq checks the driver's SeqSQL on the table idem_sequences: the registration of
// producers, the first window's insert, the update, and the lock a check holds on a
// producer's row until its transaction ends.
func Seq(t *testing.T, db func(t *testing.T) idemsql.TxDB[*sql.Tx]) {
	ctx := context.Background()
	d := db(t)
	if err := migrate.Up(ctx, d, migrate.Sequences); err != nil {
		t.Fatal(err)
	}
	s := d.Driver.Seq()
	tx := inTx(ctx, d)

	t.Run("Register", func(t *testing.T) {
		for want := int64(1); want <= 2; want++ {
			var e, n int64
			err := tx(func(q idemsql.Querier) error {
				read := s.Register
				if s.Registered != "" {
					if _, err := q.Exec(ctx, s.Register, "scope", "reg"); err != nil {
						return err
					}
					read = s.Registered
				}
				return q.QueryRow(ctx, read, "scope", "reg").Scan(&e, &n)
			})
			if err != nil || e != want || n != 0 {
				t.Fatalf("SeqSQL.Register (then Registered, if set), call %d = epoch %d, next %d, %v; want epoch %d, next 0", want, e, n, err, want)
			}
		}
	})

	t.Run("InsertUpdateLock", func(t *testing.T) {
		for i, want := range []int64{1, 0} {
			var n int64
			err := tx(func(q idemsql.Querier) (err error) {
				n, err = q.Exec(ctx, s.Insert, "scope", "p", 3, 5, []byte{1, 2})
				return err
			})
			if err != nil || n != want {
				t.Fatalf("SeqSQL.Insert, call %d = %d rows, %v; want %d (a second insert of the row does nothing)", i+1, n, err, want)
			}
		}
		seqWant(t, ctx, tx, s, "p", 3, 5, []byte{1, 2}, "SeqSQL.Insert, read by Lock,")
		err := tx(func(q idemsql.Querier) error {
			_, err := q.Exec(ctx, s.Update, "scope", "p", 4, 9, []byte{7})
			return err
		})
		if err != nil {
			t.Fatalf("SeqSQL.Update: %v", err)
		}
		seqWant(t, ctx, tx, s, "p", 4, 9, []byte{7}, "SeqSQL.Update, read by Lock,")
	})

	t.Run("LockOfNewProducer", func(t *testing.T) {
		err := tx(func(q idemsql.Querier) error {
			if s.Ensure != "" {
				if _, err := q.Exec(ctx, s.Ensure, "scope", "new"); err != nil {
					return err
				}
			}
			var e, n int64
			var bits []byte
			err := q.QueryRow(ctx, s.Lock, "scope", "new").Scan(&e, &n, &bits)
			if errors.Is(err, sql.ErrNoRows) && s.Ensure == "" {
				return nil // Insert follows
			}
			if err == nil && (e != 0 || n != 0 || len(bits) != 0) {
				t.Errorf("SeqSQL.Lock of a new producer = epoch %d, next %d, bits %x; want a blank window (0, 0, NULL)", e, n, bits)
			}
			return err
		})
		if err != nil {
			t.Fatalf("SeqSQL.Ensure then Lock of a new producer: %v", err)
		}
	})

	t.Run("LockHoldsTheRow", func(t *testing.T) {
		lockHolds(t, d, "SeqSQL.Lock", func(ctx context.Context, q idemsql.Querier) error {
			if s.Ensure != "" {
				if _, err := q.Exec(ctx, s.Ensure, "scope", "p"); err != nil {
					return err
				}
			}
			var e, n int64
			var bits []byte
			return q.QueryRow(ctx, s.Lock, "scope", "p").Scan(&e, &n, &bits)
		}, nil)
	})
}

// seqWant checks the window Lock reads for producer.
func seqWant(t *testing.T, ctx context.Context, tx func(func(idemsql.Querier) error) error, s *idemsql.SeqSQL,
	producer string, epoch, next int64, bits []byte, what string) {
	t.Helper()
	var e, n int64
	var b []byte
	err := tx(func(q idemsql.Querier) error {
		if s.Ensure != "" {
			if _, err := q.Exec(ctx, s.Ensure, "scope", producer); err != nil {
				return err
			}
		}
		return q.QueryRow(ctx, s.Lock, "scope", producer).Scan(&e, &n, &b)
	})
	if err != nil || e != epoch || n != next || !bytes.Equal(b, bits) {
		t.Fatalf("%s = epoch %d, next %d, bits %x, %v; want %d, %d, %x", what, e, n, b, err, epoch, next, bits)
	}
}

// lockHolds checks that what, run in one transaction, keeps a second transaction
// running it from finishing until the first one ends: the second's statement returns
// only after the first has committed.
// unlock, where not nil, releases a lock that outlives its transaction.
func lockHolds(t *testing.T, d idemsql.TxDB[*sql.Tx], what string, lock, unlock func(ctx context.Context, q idemsql.Querier) error) {
	t.Helper()
	ctx := context.Background()
	first, err := d.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback() //nolint:errcheck // after Commit, a no-op
	if err := lock(ctx, d.Querier(first)); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	var committed atomic.Bool // set before first commits, read after second's lock
	done := make(chan error, 1)
	go func() {
		done <- d.InTx(ctx, func(tx *sql.Tx) error {
			if err := lock(ctx, d.Querier(tx)); err != nil {
				return err
			}
			if !committed.Load() {
				return errors.New("it returned while another transaction held the lock")
			}
			if unlock != nil {
				return unlock(ctx, d.Querier(tx))
			}
			return nil
		})
	}()
	select {
	case err := <-done:
		t.Fatalf("%s in a second transaction: %v (want it to wait for the first)", what, err)
	case <-time.After(300 * time.Millisecond): // long enough for a lock that does not hold to show it
	}
	committed.Store(true)
	if unlock != nil {
		if err := unlock(ctx, d.Querier(first)); err != nil {
			t.Fatalf("%s: the release: %v", what, err)
		}
	}
	if err := first.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("%s in a second transaction: %v", what, err)
	}
}

// inTx returns a function that runs fn in a transaction of d of its own.
func inTx(ctx context.Context, d idemsql.TxDB[*sql.Tx]) func(fn func(q idemsql.Querier) error) error {
	return func(fn func(q idemsql.Querier) error) error {
		return d.InTx(ctx, func(tx *sql.Tx) error { return fn(d.Querier(tx)) })
	}
}
