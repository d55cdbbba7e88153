package idemsqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsqlite"
)

// claimInTx opens a store and claims the key s/k in a transaction left open.
func claimInTx(t *testing.T) (*idemsqlite.Store, context.Context, idem.Key, *sql.Tx, idem.Result) {
	t.Helper()
	s, _ := openStore(t, idemsqlite.Config{})
	ctx := ctxFor(t)
	k := idem.Key{Scope: "s", ID: "k"}
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.ClaimTx(ctx, tx, idem.Claim{Key: k})
	if err != nil || res.Outcome != idem.Acquired {
		t.Fatalf("ClaimTx = %v, %v", res.Outcome, err)
	}
	return s, ctx, k, tx, res
}

// A token handed out in a transaction that rolled back is never issued again, so its
// holder cannot complete a later incarnation of the key.
func TestRolledBackTokenIsNotReissued(t *testing.T) {
	t.Parallel()
	s, ctx, k, tx, first := claimInTx(t)
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	second, err := s.Claim(ctx, idem.Claim{Key: k})
	if err != nil || second.Outcome != idem.Acquired {
		t.Fatalf("Claim after rollback = %v, %v", second.Outcome, err)
	}
	if second.Token <= first.Token {
		t.Fatalf("token %d after a rolled-back ClaimTx is not above its %d", second.Token, first.Token)
	}
	if err := s.Complete(ctx, k, first.Token, []byte("late")); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("rolled-back holder's Complete = %v, want ErrLeaseLost", err)
	}
}

// The writer and transactions on Store.DB() see each other's commits.
func TestTxAndWriterShareRecords(t *testing.T) {
	t.Parallel()
	s, ctx, k, tx, res := claimInTx(t)
	if err := s.CompleteTx(ctx, tx, k, res.Token, []byte("in tx")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Claim(ctx, idem.Claim{Key: k})
	if err != nil || rep.Outcome != idem.Replayed || string(rep.Record.Result) != "in tx" {
		t.Fatalf("writer after tx commit = %v %q, %v; want Replayed", rep.Outcome, rep.Record.Result, err)
	}

	k2 := idem.Key{Scope: "s", ID: "k2"}
	held, err := s.Claim(ctx, idem.Claim{Key: k2})
	if err != nil {
		t.Fatal(err)
	}
	tx2, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback()
	if err := s.ReleaseTx(ctx, tx2, k2, held.Token+1); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("ReleaseTx with another token = %v, want ErrLeaseLost", err)
	}
	if err := s.CompleteTx(ctx, tx2, k2, held.Token, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseTx(ctx, tx2, k2, held.Token); !errors.Is(err, idem.ErrCompleted) {
		t.Fatalf("ReleaseTx of a key completed in the same tx = %v, want ErrCompleted", err)
	}
	if _, err := s.ClaimTx(ctx, nil, idem.Claim{Key: k2}); !errors.Is(err, idem.ErrInvalid) {
		t.Fatalf("ClaimTx with a nil tx = %v, want ErrInvalid", err)
	}
}

// New wraps a database the application opened itself; Close leaves it open.
func TestNewOnCallersDB(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := idemsqlite.New(ctx, db, idemsqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	k := idem.Key{Scope: "s", ID: "k"}
	res, err := s.Claim(ctx, idem.Claim{Key: k})
	if err != nil || res.Outcome != idem.Acquired {
		t.Fatalf("Claim = %v, %v", res.Outcome, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("caller's db after Close: %v", err)
	}
	// Migrations are idempotent: a second store on the same file sees the record.
	s2, err := idemsqlite.New(ctx, db, idemsqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if again, err := s2.Claim(ctx, idem.Claim{Key: k}); err != nil || again.Outcome != idem.InProgress {
		t.Fatalf("Claim on a second store = %v, %v; want InProgress", again.Outcome, err)
	}

	one, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "one.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	one.SetMaxOpenConns(1)
	if _, err := idemsqlite.New(ctx, one, idemsqlite.Config{}); !errors.Is(err, idem.ErrInvalid) {
		t.Fatalf("New on a one-connection pool = %v, want an input error", err)
	}
}

// A transaction from another *sql.DB on the same file works too (without the
// statements prepared on Store.DB()).
func TestTxFromAnotherPool(t *testing.T) {
	t.Parallel()
	s, path := openStore(t, idemsqlite.Config{})
	ctx := ctxFor(t)
	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	k := idem.Key{Scope: "s", ID: "k"}
	tx, err := other.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.ClaimTx(ctx, tx, idem.Claim{Key: k})
	if err != nil || res.Outcome != idem.Acquired {
		t.Fatalf("ClaimTx on another pool = %v, %v", res.Outcome, err)
	}
	if err := s.CompleteTx(ctx, tx, k, res.Token, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if rep, err := s.Claim(ctx, idem.Claim{Key: k}); err != nil || rep.Outcome != idem.Replayed {
		t.Fatalf("Claim after the other pool's commit = %v, %v; want Replayed", rep.Outcome, err)
	}
}
