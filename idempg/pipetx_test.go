package idempg_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/testsvc"
)

// sentTracer records what a pool sends: each statement sent on its own, and each
// batch (one round trip) with its statements.
type sentTracer struct {
	mu   sync.Mutex
	sent [][]string // one entry per round trip: a statement, or a batch's statements
}

func (s *sentTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if _, inBatch := ctx.Value(inBatchKey{}).(bool); !inBatch {
		s.add([]string{d.SQL})
	}
	return ctx
}

func (s *sentTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

type inBatchKey struct{}

func (s *sentTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	var stmts []string
	for _, q := range d.Batch.QueuedQueries {
		stmts = append(stmts, q.SQL)
	}
	s.add(stmts)
	return context.WithValue(ctx, inBatchKey{}, true)
}

func (s *sentTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (s *sentTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (s *sentTracer) add(stmts []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, stmts)
}

// take returns what was sent since the last call, each statement shortened to its
// first word.
func (s *sentTracer) take() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.sent
	s.sent = nil
	for _, stmts := range out {
		for i, q := range stmts {
			if f := strings.Fields(q); len(f) > 0 {
				stmts[i] = strings.ToLower(f[0])
			}
		}
	}
	return out
}

// tracedStore returns a Store on a pool of one connection whose round trips tr
// records, and a table effects for a handler's writes.
func tracedStore(t *testing.T) (*idempg.Store, *pgxpool.Pool, *sentTracer) {
	t.Helper()
	ctx := ctxFor(t)
	cs, _ := testsvc.PostgresSchema(t)
	cfg, err := pgxpool.ParseConfig(cs)
	check(t, err)
	tr := &sentTracer{}
	cfg.ConnConfig.Tracer = tr
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	check(t, err)
	t.Cleanup(pool.Close)
	s, err := idempg.New(ctx, pool, idempg.Config{})
	check(t, err)
	_, err = pool.Exec(ctx, "CREATE TABLE effects (id text PRIMARY KEY)")
	check(t, err)
	tr.take()
	return s, pool, tr
}

// The inbox's transaction through BeginPipelined: the BEGIN goes in one round trip
// with the recording of the key, so recording a key and applying one effect costs
// three round trips, as a plain BEGIN, INSERT, COMMIT does.
func TestBeginPipelinedSendsBeginWithFirstStatement(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	s, pool, tr := tracedStore(t)
	db := idempg.TxDB(pool)
	if db.BeginPipelined == nil {
		t.Fatal("idempg.TxDB sets no BeginPipelined")
	}
	c := idem.Claim{Key: idem.Key{Scope: "s", ID: "k1"}}
	apply := func() idem.Outcome {
		var out []idem.Outcome
		check(t, db.InTxPipelined(ctx, func(tx pgx.Tx) error {
			var err error
			if out, err = s.RecordTx(ctx, tx, []idem.Claim{c}); err != nil || out[0] != idem.Acquired {
				return err
			}
			_, err = tx.Exec(ctx, "INSERT INTO effects (id) VALUES ($1)", c.Key.ID)
			return err
		}))
		return out[0]
	}
	// A TxDB's first use checks once whether a transaction pooler sits in front of
	// a pool that caches statements (pooler.go): not part of the transaction.
	check(t, db.Read(ctx, func(idemsql.Querier) error { return nil }))
	tr.take()
	if o := apply(); o != idem.Acquired {
		t.Fatalf("first record of %v: %v, want Acquired", c.Key, o)
	}
	got := tr.take()
	// The statements are prepared on first use; what is sent to run them is what
	// counts: skip nothing, but expect the pipeline first.
	if len(got) != 3 || len(got[0]) != 2 || got[0][0] != "begin" || got[0][1] != "insert" ||
		got[1][0] != "insert" || got[2][0] != "commit" {
		t.Fatalf("round trips of a pipelined transaction: %q, want [[begin insert] [insert] [commit]]", got)
	}
	// A duplicate: the key's row is found, nothing applied, and the connection
	// is left clean for the next transaction.
	if o := apply(); o != idem.Replayed {
		t.Fatalf("second record of %v: %v, want Replayed", c.Key, o)
	}
	var n int
	check(t, pool.QueryRow(ctx, "SELECT count(*) FROM effects").Scan(&n))
	if n != 1 {
		t.Fatalf("effects: %d rows, want 1", n)
	}
}

// The key and the effect of a pipelined transaction commit together: before the
// commit another session sees neither and, rolled back, the key is free again.
func TestBeginPipelinedIsOneTransaction(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	s, pool := newStore(t, idempg.Config{})
	_, err := pool.Exec(ctx, "CREATE TABLE effects (id text PRIMARY KEY)")
	check(t, err)
	db := idempg.TxDB(pool)
	c := idem.Claim{Key: idem.Key{Scope: "s", ID: "k1"}}

	tx, err := db.BeginPipelined(ctx)
	check(t, err)
	out, err := s.RecordTx(ctx, tx, []idem.Claim{c})
	check(t, err)
	if out[0] != idem.Acquired {
		t.Fatalf("record: %v, want Acquired", out[0])
	}
	_, err = tx.Exec(ctx, "INSERT INTO effects (id) VALUES ('k1')")
	check(t, err)
	var inTx bool
	check(t, tx.QueryRow(ctx, "SELECT now() <> statement_timestamp() OR pg_current_xact_id_if_assigned() IS NOT NULL").Scan(&inTx))
	if !inTx {
		t.Fatal("the statements did not run in a transaction")
	}
	if _, err := s.Inspect(ctx, c.Key); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("Inspect before commit: %v, want ErrNotFound", err)
	}
	check(t, tx.Rollback(ctx))
	if err := tx.Rollback(ctx); !errors.Is(err, pgx.ErrTxClosed) {
		t.Fatalf("second Rollback: %v, want ErrTxClosed", err)
	}
	var n int
	check(t, pool.QueryRow(ctx, "SELECT count(*) FROM effects").Scan(&n))
	if n != 0 {
		t.Fatalf("effects after rollback: %d rows, want 0", n)
	}

	// Rolled back, the key is free: recorded again, with a savepoint's write
	// rolled back inside, and committed.
	tx, err = db.BeginPipelined(ctx)
	check(t, err)
	out, err = s.RecordTx(ctx, tx, []idem.Claim{c})
	check(t, err)
	if out[0] != idem.Acquired {
		t.Fatalf("record after rollback: %v, want Acquired", out[0])
	}
	sp, err := tx.Begin(ctx)
	check(t, err)
	_, err = sp.Exec(ctx, "INSERT INTO effects (id) VALUES ('in savepoint')")
	check(t, err)
	check(t, sp.Rollback(ctx))
	_, err = tx.Exec(ctx, "INSERT INTO effects (id) VALUES ('k1')")
	check(t, err)
	check(t, tx.Commit(ctx))
	if err := tx.Commit(ctx); !errors.Is(err, pgx.ErrTxClosed) {
		t.Fatalf("second Commit: %v, want ErrTxClosed", err)
	}
	rec, err := s.Inspect(ctx, c.Key)
	check(t, err)
	if rec.State != idem.StateCompleted {
		t.Fatalf("key after commit: %v, want completed", rec.State)
	}
	var ids []string
	rows, err := pool.Query(ctx, "SELECT id FROM effects")
	check(t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
	check(t, err)
	if len(ids) != 1 || ids[0] != "k1" {
		t.Fatalf("effects: %q, want [k1]", ids)
	}
}

// A first statement that fails aborts the transaction like any statement, and the
// rollback leaves the connection clean for the next transaction. A transaction that
// ran nothing sends nothing.
func TestBeginPipelinedFailedFirstStatement(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	_, pool, tr := tracedStore(t) // one connection: a broken or leaked one would show
	db := idempg.TxDB(pool)

	err := db.InTxPipelined(ctx, func(tx pgx.Tx) error {
		var x int
		return tx.QueryRow(ctx, "SELECT 1/0").Scan(&x)
	})
	if err == nil || !strings.Contains(err.Error(), "division by zero") {
		t.Fatalf("a failing first QueryRow: %v, want division by zero", err)
	}
	err = db.InTxPipelined(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO effects (id) VALUES (NULL)")
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "null value") {
		t.Fatalf("a failing first Exec: %v, want a not-null violation", err)
	}
	// The row of a first QueryRow left unread does not hold the connection.
	check(t, db.InTxPipelined(ctx, func(tx pgx.Tx) error {
		tx.QueryRow(ctx, "INSERT INTO effects (id) VALUES ('a') RETURNING id")
		_, err := tx.Exec(ctx, "INSERT INTO effects (id) VALUES ('b')")
		return err
	}))
	var n int
	check(t, pool.QueryRow(ctx, "SELECT count(*) FROM effects").Scan(&n))
	if n != 2 {
		t.Fatalf("effects: %d rows, want 2", n)
	}
	if st := pool.Stat(); st.TotalConns() != 1 {
		t.Fatalf("pool: %d connections, want the one it had", st.TotalConns())
	}

	tr.take()
	check(t, db.InTxPipelined(ctx, func(pgx.Tx) error { return nil }))
	if got := tr.take(); len(got) != 0 {
		t.Fatalf("an empty transaction sent %q, want nothing", got)
	}
}
