// Package sqlstore is the half of idem's SQL stores that is the same logic on every
// database: the operator's view of the records (idem.Inspector), the list of scopes
// (idem.ScopeLister), the sweeper (idem.Sweeper) and the records gauge, written once
// over the statements of a driver's idemsql.RecordsSQL. A store embeds a *Records
// and keeps its claim path (Claim, Complete, Release, Renew, RecordTx) as its own
// tuned code: Postgres's rising tokens and pipelined BEGIN, SQLite's single writer,
// MariaDB's group claims.
//
// A new database's store gets all of this by filling RecordsSQL in its driver and
// passing drivertest.Records.
package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/cursor"
	"github.com/idemhq/idem/internal/metrics"
	"github.com/idemhq/idem/storekit"
)

// Config configures Records. Table and SweepBatch are required (the store's own
// Config supplies its defaults).
type Config struct {
	// Table is the records table's name, filled into the statements' {{table}}.
	Table string
	// SweepBatch is how many rows one Sweep statement deletes.
	SweepBatch int
	// Swept, where set, is told how many rows each Sweep deleted (the store's
	// idem_swept_total).
	Swept func(n int)
	// Registerer, if set, receives the idem_records gauge of the table
	// (RecordsSQL.Count), labelled with the database's name.
	Registerer prometheus.Registerer
}

func (cfg Config) validate(dbErr error) error {
	switch {
	case dbErr != nil:
		return dbErr
	case cfg.Table == "":
		return &idem.InputError{Field: "sqlstore.Config.Table", Reason: "is empty", Fix: "pass the store's records table (its Config.Table, defaulted)"}
	case cfg.SweepBatch <= 0:
		return &idem.InputError{Field: "sqlstore.Config.SweepBatch", Reason: fmt.Sprintf("is %d", cfg.SweepBatch),
			Fix: "pass the store's Config.SweepBatch, defaulted: a positive row count"}
	}
	return nil
}

// Records runs the shared half of a SQL store on one records table. It is safe for
// concurrent use.
type Records struct {
	q          idemsql.RecordsSQL
	backend    string
	auto       func(ctx context.Context, fn func(idemsql.Querier) error) error
	inTx       func(ctx context.Context, fn func(idemsql.Querier) error) error
	sweepBatch int
	swept      func(int)
}

var (
	_ idem.Inspector   = (*Records)(nil)
	_ idem.ScopeLister = (*Records)(nil)
	_ idem.Sweeper     = (*Records)(nil)
)

// New returns the Records of cfg.Table in db, with the statements of db's Driver,
// and registers its gauge. It runs no statement: a store calls it after its
// migrations.
func New[Tx any](db idemsql.TxDB[Tx], cfg Config) (*Records, error) {
	if err := cfg.validate(db.Validate()); err != nil {
		return nil, err
	}
	r := &Records{
		q:          db.Driver.Records().ForTable(cfg.Table),
		backend:    db.Dialect().String(),
		auto:       db.Auto,
		sweepBatch: cfg.SweepBatch,
		swept:      cfg.Swept,
	}
	r.inTx = func(ctx context.Context, fn func(idemsql.Querier) error) error {
		return db.InTx(ctx, func(tx Tx) error { return fn(db.Querier(tx)) })
	}
	return r, metrics.RecordsFunc(cfg.Registerer, r.backend, r.count)
}

// Inspect implements idem.Inspector. It reads committed records: a claim inside an
// open ClaimTx transaction is not there yet.
func (r *Records) Inspect(ctx context.Context, k idem.Key) (rec idem.Record, err error) {
	if err := storekit.CheckEvict(ctx, k); err != nil {
		return idem.Record{}, err
	}
	err = r.auto(ctx, func(q idemsql.Querier) error {
		rec, err = r.q.ScanRecord(q.QueryRow(ctx, r.q.Inspect, k.Scope, k.ID), k)
		return err
	})
	switch {
	case isNoRows(err):
		return idem.Record{}, idem.ErrNotFound
	case err != nil:
		return idem.Record{}, r.backendErr(ctx, "inspect", err)
	}
	return rec, nil
}

// List implements idem.Inspector: one range of the primary key per page (see
// RecordsSQL.List), ids in ascending order; the cursor is the base64url of the
// page's last id.
func (r *Records) List(ctx context.Context, scope, after string, limit int) (idem.KeyPage, error) {
	after, err := cursor.ListAfter(ctx, scope, after, limit)
	if err != nil {
		return idem.KeyPage{}, err
	}
	recs, next, err := readPage(ctx, r, "list", r.q.List, []any{scope, after, limit + 1}, limit, cursor.RecordID,
		func(rs idemsql.Rows) (idem.Record, error) {
			var id string
			rec, err := r.q.ScanRecord(rs, idem.Key{Scope: scope}, &id)
			rec.Key.ID = id
			return rec, err
		})
	return idem.KeyPage{Records: recs, Next: next}, err
}

// Scopes implements idem.ScopeLister: limit+1 seeks of the primary key per page
// (see RecordsSQL.Scopes), scopes in ascending order; the cursor is the base64url of
// the page's last scope.
func (r *Records) Scopes(ctx context.Context, after string, limit int) (idem.ScopePage, error) {
	after, err := cursor.ScopesAfter(ctx, after, limit)
	if err != nil {
		return idem.ScopePage{}, err
	}
	scopes, next, err := readPage(ctx, r, "scopes", r.q.Scopes, []any{after, limit + 1}, limit, cursor.Self,
		func(rs idemsql.Rows) (scope string, err error) {
			err = rs.Scan(&scope)
			return scope, err
		})
	return idem.ScopePage{Scopes: scopes, Next: next}, err
}

// readPage reads a keyset page of limit+1 rows with query (op names it in errors)
// and trims it to limit, with the cursor of the next page (see cursor.Trim).
func readPage[T any](ctx context.Context, r *Records, op, query string, args []any, limit int,
	sortKey func(T) []string, scan func(idemsql.Rows) (T, error)) ([]T, string, error) {
	var rows []T
	err := r.rows(ctx, query, args, func(rs idemsql.Rows) error {
		v, err := scan(rs)
		rows = append(rows, v)
		return err
	})
	if err != nil {
		return nil, "", r.backendErr(ctx, op, err)
	}
	rows, next := cursor.Trim(rows, limit, sortKey)
	return rows, next, nil
}

// rows runs query outside any transaction and calls each for every row it returns.
func (r *Records) rows(ctx context.Context, query string, args []any, each func(idemsql.Rows) error) error {
	return r.auto(ctx, func(q idemsql.Querier) error { return idemsql.EachRow(ctx, q, query, args, each) })
}

// Sweep implements idem.Sweeper: it deletes expired rows, SweepBatch per statement
// (RecordsSQL.Sweep), until a statement finds fewer, and returns how many it
// deleted.
func (r *Records) Sweep(ctx context.Context) (int, error) {
	total := 0
	if r.swept != nil {
		defer func() { r.swept(total) }()
	}
	if r.q.Sweep == "" {
		return 0, r.backendErr(ctx, "sweep", errors.New("the driver's RecordsSQL has no Sweep statement: the store must sweep on its own"))
	}
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		var n int64
		err := r.auto(ctx, func(q idemsql.Querier) (err error) {
			n, err = q.Exec(ctx, r.q.Sweep, r.sweepBatch)
			return err
		})
		if err != nil {
			return total, r.backendErr(ctx, "sweep", err)
		}
		total += int(n)
		if n < int64(r.sweepBatch) {
			return total, nil
		}
	}
}

// countTimeout bounds a scrape's read of the gauge: it must not hang on a busy
// database.
const countTimeout = 5 * time.Second

// count is the records gauge's reading (RecordsSQL.Count). A scrape cannot return
// an error, so a failed read, or a database without an estimate, reports NaN (no
// value) rather than a false zero.
func (r *Records) count() float64 {
	ctx, cancel := context.WithTimeout(context.Background(), countTimeout)
	defer cancel()
	var n *float64
	err := r.auto(ctx, func(q idemsql.Querier) error { return q.QueryRow(ctx, r.q.Count).Scan(&n) })
	if err != nil || n == nil {
		return math.NaN()
	}
	return *n
}

// backendErr wraps a driver failure. If ctx ended, its error stays matchable with
// errors.Is even when the driver reported the cancellation in its own words.
func (r *Records) backendErr(ctx context.Context, op string, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		err = fmt.Errorf("%w (%w)", err, cerr)
	}
	return &idem.BackendError{Backend: r.backend, Op: op, Err: err}
}
