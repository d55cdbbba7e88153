package idemgrpc_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemgrpc"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/internal/grpctest"
	"github.com/idemhq/idem/internal/orderspb"
)

// atomicRig is a rig behind AtomicUnaryServerInterceptor on SQLite, whose
// handler inserts each execution's order into the table orders through TxFrom,
// then calls fail (when set) for the status to answer.
type atomicRig struct {
	*rig
	sqlite *idemsqlite.Store
}

func newAtomicRig(t *testing.T, cfg idemgrpc.Config, fail func(ctx context.Context, req *orderspb.PlaceOrderRequest, o *orderspb.Order) error, o rigOpts) *atomicRig {
	t.Helper()
	ctx := context.Background()
	store, err := idemsqlite.Open(ctx, filepath.Join(t.TempDir(), "idem.db"), idemsqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	if _, err := store.DB().ExecContext(ctx, "CREATE TABLE orders (customer TEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	db, err := idemsql.SQLDB(ctx, store.DB())
	if err != nil {
		t.Fatal(err)
	}
	if o.mw, err = idemgrpc.AtomicUnaryServerInterceptor(db, store, cfg); err != nil {
		t.Fatal(err)
	}
	o.orders = &grpctest.Orders{Effect: func(ctx context.Context, req *orderspb.PlaceOrderRequest, ord *orderspb.Order) error {
		tx, ok := idemgrpc.TxFrom[*sql.Tx](ctx)
		if !ok {
			return status.Error(codes.FailedPrecondition, "TxFrom found no transaction")
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO orders (customer) VALUES ($1)", req.GetCustomer()); err != nil {
			return err
		}
		if fail != nil {
			return fail(ctx, req, ord)
		}
		return nil
	}}
	return &atomicRig{rig: newRig(t, cfg, o), sqlite: store}
}

// rows is the number of orders committed.
func (a *atomicRig) rows(t *testing.T) int {
	t.Helper()
	var n int
	if err := a.sqlite.DB().QueryRowContext(context.Background(), "SELECT COUNT(*) FROM orders").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The handler's write commits with the stored result; the retry replays it and
// writes nothing.
func TestAtomicCommitsEffectWithResult(t *testing.T) {
	t.Parallel()
	a := newAtomicRig(t, idemgrpc.Config{}, nil, rigOpts{})
	key := idemkey.NewV7()
	first := a.place(context.Background(), key, "c", 5)
	again := a.place(context.Background(), key, "c", 5)
	if first.err != nil || again.err != nil || !idemgrpc.Replayed(again.header) || again.order.GetOrderId() != first.order.GetOrderId() {
		t.Fatalf("first %v %v, again %v %v (header %v)", first.order, first.err, again.order, again.err, again.header)
	}
	if n := a.rows(t); n != 1 {
		t.Fatalf("%d orders committed, want 1", n)
	}
	if _, ok := idemgrpc.TxFrom[*sql.Tx](context.Background()); ok {
		t.Fatal("TxFrom found a transaction outside the interceptor")
	}
}

// What is rolled back: a transient code (the retry runs and commits), a panic,
// and a result too large to store (the caller gets Internal, never a response
// for effects that are not recorded).
func TestAtomicRollsBack(t *testing.T) {
	t.Parallel()
	t.Run("transient code", func(t *testing.T) {
		t.Parallel()
		a := newAtomicRig(t, idemgrpc.Config{}, failOnce(func() error { return status.Error(codes.Aborted, "conflict") }), rigOpts{})
		key := idemkey.NewV7()
		if c := a.place(context.Background(), key, "c", 5); status.Code(c.err) != codes.Aborted || a.rows(t) != 0 {
			t.Fatalf("first call: %v, %d rows", c.err, a.rows(t))
		}
		if c := a.place(context.Background(), key, "c", 5); c.err != nil || idemgrpc.Replayed(c.header) || a.rows(t) != 1 {
			t.Fatalf("retry: %v, %d rows", c.err, a.rows(t))
		}
	})
	t.Run("panic", func(t *testing.T) {
		t.Parallel()
		recovery := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
			defer func() {
				if p := recover(); p != nil {
					err = status.Errorf(codes.Internal, "recovered: %v", p)
				}
			}()
			return h(ctx, req)
		}
		a := newAtomicRig(t, idemgrpc.Config{}, failOnce(func() error { panic("handler bug") }), rigOpts{outer: []grpc.UnaryServerInterceptor{recovery}})
		key := idemkey.NewV7()
		if c := a.place(context.Background(), key, "c", 5); status.Code(c.err) != codes.Internal || a.rows(t) != 0 {
			t.Fatalf("first call: %v, %d rows", c.err, a.rows(t))
		}
		if c := a.place(context.Background(), key, "c", 5); c.err != nil || a.rows(t) != 1 {
			t.Fatalf("retry: %v, %d rows", c.err, a.rows(t))
		}
	})
	t.Run("too large", func(t *testing.T) {
		t.Parallel()
		a := newAtomicRig(t, idemgrpc.Config{MaxResponseBytes: 16}, nil, rigOpts{})
		key := idemkey.NewV7()
		for i := range 2 {
			c := a.place(context.Background(), key, "c", 5)
			wantStatus(t, c.err, codes.Internal, idemgrpc.ReasonNotStored)
			if c.order != nil || a.rows(t) != 0 {
				t.Fatalf("call %d: %v, %d rows: want nothing sent, nothing kept", i, c.order, a.rows(t))
			}
		}
		if n := a.orders.Executions(); n != 2 {
			t.Fatalf("%d executions, want 2 (the key stays free)", n)
		}
	})
}

// The atomic interceptor's own arguments are checked.
func TestAtomicConfigErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, err := idemsqlite.Open(ctx, filepath.Join(t.TempDir(), "idem.db"), idemsqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	db, err := idemsql.SQLDB(ctx, store.DB())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idemgrpc.AtomicUnaryServerInterceptor[*sql.Tx](db, nil, idemgrpc.Config{}); !isInputError(err, "store") {
		t.Fatalf("nil store: %v", err)
	}
	if _, err := idemgrpc.AtomicUnaryServerInterceptor(db, store, idemgrpc.Config{MaxResponseBytes: -1}); !isInputError(err, "Config.MaxResponseBytes") {
		t.Fatalf("bad Config: %v", err)
	}
	if _, err := idemgrpc.AtomicUnaryServerInterceptor(idemsql.TxDB[*sql.Tx]{}, store, idemgrpc.Config{}); err == nil {
		t.Fatal("a zero TxDB was accepted")
	}
}

func isInputError(err error, field string) bool {
	ie, ok := errors.AsType[*idem.InputError](err)
	return ok && ie.Field == field
}
