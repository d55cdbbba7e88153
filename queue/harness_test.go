package queue_test

import (
	"context"
	"database/sql"
	"log/slog"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/queue"
)

// waitLong only ends a test that hangs: the waits are for progress.
const waitLong = 2 * time.Minute

var quiet = slog.New(slog.DiscardHandler)

// kinds are the databases every test runs on.
var kinds = []string{"sqlite", "postgres", "mysql"}

// database is one database: its handle (taking $1 placeholders on every kind,
// for the test's own SQL), its TxDB and its key store.
type database struct {
	kind  string
	db    *sql.DB
	tx    idemsql.TxDB[*sql.Tx]
	store idem.TxStore[*sql.Tx]
}

func openDB(t testing.TB, kind string) *database {
	t.Helper()
	o := sqltest.Open(t, kind)
	return &database{kind: kind, db: o.DB, tx: o.Tx, store: o.Store}
}

func (d *database) exec(t testing.TB, query string, args ...any) {
	t.Helper()
	if _, err := d.db.ExecContext(context.Background(), query, args...); err != nil {
		t.Fatalf("%s: %s: %v", d.kind, query, err)
	}
}

func (d *database) count(t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := d.db.QueryRowContext(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %s: %v", d.kind, query, err)
	}
	return n
}

func newQueue(t testing.TB, d *database, cfg queue.Config) *queue.Queue[*sql.Tx] {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	q, err := queue.New(context.Background(), d.tx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func newSource(t testing.TB, q *queue.Queue[*sql.Tx], cfg queue.SourceConfig) *queue.Source[*sql.Tx] {
	t.Helper()
	s, err := q.Source(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// eventually waits for cond, by progress: it fails only when nothing happens
// for waitLong.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached in %v", what, waitLong)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
