package idemmysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsql/sqlstore"
	"github.com/idemhq/idem/internal/metrics"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/migrate"
	"github.com/idemhq/idem/storekit"
)

const backend = "mysql"

// Defaults applied to a zero Config.
const (
	DefaultTable      = migrate.DefaultRecordsTable
	DefaultSweepBatch = 10_000
	// DefaultOpenTimeout bounds New's checks and migration when its ctx has no
	// deadline.
	DefaultOpenTimeout = 60 * time.Second
)

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// Table is the records table: a lowercase identifier (a-z, 0-9, _) of at most
	// migrate.MaxNameLen bytes, in the connection's database. Its tokens are drawn
	// from Table+"_tokens". Empty means DefaultTable.
	Table string
	// Registerer, if set, receives the store's Prometheus metrics: idem_claims_total,
	// idem_duplicates_total, idem_claim_duration_seconds, idem_swept_total and
	// idem_records (InnoDB's estimate).
	Registerer prometheus.Registerer
	// TracerProvider receives a span per claim, completion and release (see the
	// package documentation). Nil means the global provider; while that is unset,
	// or with a no-op provider, no span is started.
	TracerProvider trace.TracerProvider
	// SweepBatch is how many expired rows one Sweep statement deletes. Zero means
	// DefaultSweepBatch; negative is invalid.
	SweepBatch int
	// SkipMigrate leaves the schema alone, for deployments that apply `idem migrate
	// print --dialect mysql` with their own tool: New then only checks that the table
	// is up to date, and fails with a *migrate.BehindError naming the missing
	// migration.
	SkipMigrate bool
	// MaxClaimGroup bounds how many concurrent Claims share one round trip and one
	// commit when they queue up (see group.go). Zero means DefaultMaxClaimGroup;
	// 1 sends every Claim on its own; negative is invalid. Group claims need
	// MariaDB (a sequence and the procedures of the records migrations); on MySQL
	// every Claim goes on its own.
	MaxClaimGroup int

	offline bool // tests only: no schema check either (export_test.go)
}

func (cfg Config) withDefaults() (Config, error) {
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	if cfg.SweepBatch == 0 {
		cfg.SweepBatch = DefaultSweepBatch
	}
	if cfg.MaxClaimGroup == 0 {
		cfg.MaxClaimGroup = DefaultMaxClaimGroup
	}
	if cfg.MaxClaimGroup < 0 {
		return cfg, &idem.InputError{Field: "idemmysql.Config.MaxClaimGroup", Reason: fmt.Sprintf("is negative (%d)", cfg.MaxClaimGroup),
			Fix: fmt.Sprintf("use a positive claim count (1 turns group claims off), or zero for the default %d", DefaultMaxClaimGroup)}
	}
	if cfg.SweepBatch < 0 {
		return cfg, &idem.InputError{Field: "idemmysql.Config.SweepBatch", Reason: fmt.Sprintf("is negative (%d)", cfg.SweepBatch),
			Fix: fmt.Sprintf("use a positive row count, or zero for the default %d", DefaultSweepBatch)}
	}
	// The name rules are the migrations' (package migrate), which create the table.
	if err := migrate.CheckName(idemsql.MySQL, migrate.Records(cfg.Table), "idemmysql.Config.Table"); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// Store is an idem.Store and idem.TxStore[*sql.Tx] on MySQL or MariaDB. It is safe
// for concurrent use.
type Store struct {
	// sharedRecords is the Inspector, ScopeLister and row sweep every SQL store shares.
	*sharedRecords

	db         *sql.DB
	table      string
	ownDB      bool
	sequence   bool     // tokens from Table+"_token_seq" (MariaDB), not Table+"_tokens"
	procedure  bool     // Table+"_claim" exists (MariaDB): Claim of a fresh key in one call
	group      *grouper // nil unless Table+"_claim_group" exists and MaxClaimGroup > 1
	q          queries
	m          *metrics.Store
	tr         otelx.StoreTracer
	sweepBatch int
}

var (
	_ idem.Store            = (*Store)(nil)
	_ idem.TxStore[*sql.Tx] = (*Store)(nil)
	_ idem.Sweeper          = (*Store)(nil)
	_ idem.Renewer          = (*Store)(nil)
	_ idem.BatchClaimer     = (*Store)(nil)
	_ idem.Inspector        = (*Store)(nil)
	_ idem.ScopeLister      = (*Store)(nil)

	_ idem.TxResultRecorder[*sql.Tx] = (*Store)(nil)
)

// Open connects to the database of a mysql://user:password@host:3306/database URL
// (see DSN) and returns a Store on it; Close closes the connection pool.
func Open(ctx context.Context, rawURL string, cfg Config) (*Store, error) {
	dsn, err := DSN(rawURL)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, &idem.BackendError{Backend: backend, Op: "open", Err: err}
	}
	s, err := New(ctx, db, cfg)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	s.ownDB = true
	return s, nil
}

// New returns a Store on db, a handle from sql.Open("mysql", dsn), creating or
// upgrading its table (package migrate) unless cfg.SkipMigrate is set. Size db with
// SetMaxOpenConns: database/sql opens a connection per concurrent call by default.
func New(ctx context.Context, db *sql.DB, cfg Config) (*Store, error) {
	if db == nil {
		return nil, &idem.InputError{Field: "db", Reason: "is nil", Fix: `pass a handle from sql.Open("mysql", dsn), or use idemmysql.Open`}
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if !cfg.offline {
		// A peer that accepts the connection and never answers (another service on
		// the port) would hold New forever: the driver bounds only the dial.
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, DefaultOpenTimeout)
			defer cancel()
		}
		if err := checkStrict(ctx, db); err != nil {
			return nil, err
		}
		if err := migrate.Ensure(ctx, idemsql.SQLDBFor(Driver(), db), cfg.SkipMigrate, migrate.Records(cfg.Table)); err != nil {
			return nil, err
		}
	}
	m, err := metrics.NewStore(cfg.Registerer, backend)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, table: cfg.Table, q: newQueries(cfg.Table), m: m, sweepBatch: cfg.SweepBatch,
		tr: otelx.NewStoreTracer(cfg.TracerProvider, "mysql")}
	if !cfg.offline {
		if err := checkShape(ctx, db, cfg.Table); err != nil {
			return nil, err
		}
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) > 0 FROM information_schema.tables
			WHERE table_schema = DATABASE() AND table_name = ? AND table_type = 'SEQUENCE'`, cfg.Table+"_token_seq").Scan(&s.sequence); err != nil {
			return nil, &idem.BackendError{Backend: backend, Op: "open", Err: err}
		}
		var groups bool
		for name, found := range map[string]*bool{"_claim": &s.procedure, "_claim_group": &groups} {
			if err := db.QueryRowContext(ctx, `SELECT COUNT(*) > 0 FROM information_schema.routines
			WHERE routine_schema = DATABASE() AND routine_name = ? AND routine_type = 'PROCEDURE'`, cfg.Table+name).Scan(found); err != nil {
				return nil, &idem.BackendError{Backend: backend, Op: "open", Err: err}
			}
		}
		if groups && s.procedure && s.sequence && cfg.MaxClaimGroup > 1 {
			s.group = newGrouper(s, cfg.MaxClaimGroup)
		}
	}
	s.sharedRecords, err = sqlstore.New(idemsql.SQLDBFor(Driver(), db), sqlstore.Config{Table: cfg.Table,
		SweepBatch: cfg.SweepBatch, Swept: m.Swept, Registerer: cfg.Registerer})
	return s, err
}

// checkShape reads no row but every column the store uses, so a table of that name
// that idem did not create (CREATE TABLE IF NOT EXISTS left it as it was) is found
// now, not at the first claim.
func checkShape(ctx context.Context, db *sql.DB, table string) error {
	rows, err := db.QueryContext(ctx, "SELECT scope, id, state, fingerprint, token, result, retention_us, created_us, expires_us FROM "+
		quote(table)+" LIMIT 0")
	if err == nil {
		return rows.Close()
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1054 { // ER_BAD_FIELD_ERROR
		return &idem.InputError{Field: "idemmysql.Config.Table", Reason: fmt.Sprintf("names a table %q that idem did not create (%s)", table, me.Message),
			Fix: "choose another Config.Table, or rename that table and run the migration again"}
	}
	return &idem.BackendError{Backend: backend, Op: "open", Err: err}
}

// checkStrict refuses a session whose sql_mode would let MySQL store a wrong value
// with a warning (a too-long value cut short) instead of failing the statement.
func checkStrict(ctx context.Context, db *sql.DB) error {
	var mode string
	if err := db.QueryRowContext(ctx, "SELECT @@SESSION.sql_mode").Scan(&mode); err != nil {
		return &idem.BackendError{Backend: backend, Op: "open",
			Err: fmt.Errorf("%w (no MySQL or MariaDB server answered: check the URL's host and port)", err)}
	}
	if !strings.Contains(mode, "STRICT_TRANS_TABLES") && !strings.Contains(mode, "STRICT_ALL_TABLES") {
		return &idem.InputError{Field: "sql_mode", Reason: fmt.Sprintf("is %q, without STRICT_TRANS_TABLES: MySQL would cut a value short with a warning instead of failing", mode),
			Fix: "keep the server's default sql_mode (strict since MySQL 5.7 and MariaDB 10.2.4), or add STRICT_TRANS_TABLES, e.g. ?sql_mode=%27STRICT_TRANS_TABLES%27 in the URL"}
	}
	return nil
}

// DB returns the handle the store runs on, for the application's own transactions.
func (s *Store) DB() *sql.DB { return s.db }

// Close closes the connection pool if Open made it.
func (s *Store) Close() error {
	if s.ownDB {
		return s.db.Close()
	}
	return nil
}

// maxAttempts bounds the rounds of a claim whose row changes under it.
const maxAttempts = 8

var errChurn = errors.New("the key's row kept changing; try again")

var errNilTx = &idem.InputError{Field: "tx", Reason: "is nil", Fix: "pass the transaction the business write runs in"}

// Claim implements idem.Store in a transaction of its own, tried again when InnoDB
// picks it as a deadlock victim.
func (s *Store) Claim(ctx context.Context, c idem.Claim) (res idem.Result, err error) {
	// The span is the caller's own, even when the group writer answers many
	// claims with one statement: it starts and ends in this goroutine.
	ctx, span := s.tr.Claim(ctx, c.Key, false)
	defer func() { otelx.EndClaim(span, res, err) }()
	start := s.m.Start()
	if err := c.Validate(); err != nil {
		return idem.Result{}, err
	}
	if s.group != nil {
		res, err = s.group.claim(ctx, c)
	} else {
		res, err = s.claimAlone(ctx, c)
	}
	s.m.Claim(c.Key.Scope, res.Outcome, err, start)
	return res, err
}

// callClaim claims a fresh key in one round trip, through the procedure of
// migration 002 where it exists (MariaDB). done is false when there is no procedure
// or the key was taken: the caller then claims with the statements, which read the
// row.
func (s *Store) callClaim(ctx context.Context, c idem.Claim, query string) (res idem.Result, done bool, err error) {
	if !s.procedure {
		return idem.Result{}, false, nil
	}
	c = c.WithDefaults()
	fp := c.Fingerprint
	if fp == nil {
		fp = []byte{}
	}
	var token int64
	err = idemsql.RetrySerializationFailures(ctx, func() error {
		return s.db.QueryRowContext(ctx, query, c.Key.Scope, c.Key.ID, fp, micros(c.Lease), micros(c.Retention)).Scan(&token)
	})
	switch {
	case err != nil:
		return idem.Result{}, true, finalErr(ctx, "claim", err)
	case token == 0:
		return idem.Result{}, false, nil // taken: the statements read the row
	}
	return idem.Result{Outcome: idem.Acquired, Token: uint64(token)}, true, nil
}

// ClaimTx implements idem.TxStore: the claim joins tx. A concurrent claimant of the
// same key waits for tx to end. A deadlock (which InnoDB ends by rolling tx back) is
// an *idem.BackendError: run the whole transaction again.
func (s *Store) ClaimTx(ctx context.Context, tx *sql.Tx, c idem.Claim) (res idem.Result, err error) {
	ctx, span := s.tr.Claim(ctx, c.Key, true)
	defer func() { otelx.EndClaim(span, res, err) }()
	start := s.m.Start()
	if err := c.Validate(); err != nil {
		return idem.Result{}, err
	}
	if tx == nil {
		return idem.Result{}, errNilTx
	}
	res, err = s.claim(ctx, tx, c)
	if err != nil {
		err = backendErr(ctx, "claim", err)
	}
	s.m.Claim(c.Key.Scope, res.Outcome, err, start)
	return res, err
}

// Complete implements idem.Store.
func (s *Store) Complete(ctx context.Context, k idem.Key, token uint64, result []byte) error {
	return s.tr.Finish(ctx, otelx.SpanStoreComplete, k, token, false, func(ctx context.Context) error {
		return s.ownTx(ctx, "complete", func(tx *sql.Tx) error { return s.complete(ctx, tx, k, token, result) })
	})
}

// CompleteTx implements idem.TxStore: the completion commits or rolls back with tx.
func (s *Store) CompleteTx(ctx context.Context, tx *sql.Tx, k idem.Key, token uint64, result []byte) error {
	return s.tr.Finish(ctx, otelx.SpanStoreComplete, k, token, true, func(ctx context.Context) error {
		if tx == nil {
			return errNilTx
		}
		return finalErr(ctx, "complete", s.complete(ctx, tx, k, token, result))
	})
}

// Release implements idem.Store.
func (s *Store) Release(ctx context.Context, k idem.Key, token uint64) error {
	return s.tr.Finish(ctx, otelx.SpanStoreRelease, k, token, false, func(ctx context.Context) error {
		return s.ownTx(ctx, "release", func(tx *sql.Tx) error { return s.release(ctx, tx, k, token) })
	})
}

// ReleaseTx implements idem.TxStore.
func (s *Store) ReleaseTx(ctx context.Context, tx *sql.Tx, k idem.Key, token uint64) error {
	return s.tr.Finish(ctx, otelx.SpanStoreRelease, k, token, true, func(ctx context.Context) error {
		if tx == nil {
			return errNilTx
		}
		return finalErr(ctx, "release", s.release(ctx, tx, k, token))
	})
}

// Renew implements idem.Renewer. It works on committed claims: a claim still inside
// an open ClaimTx transaction is invisible to it and waits for it.
func (s *Store) Renew(ctx context.Context, k idem.Key, token uint64, lease time.Duration) error {
	return s.tr.Renew(ctx, k, token, lease, func(ctx context.Context, lease time.Duration) error {
		return s.ownTx(ctx, "renew", func(tx *sql.Tx) error { return s.renew(ctx, tx, k, token, lease) })
	})
}

// Sweep implements idem.Sweeper: it deletes expired rows, SweepBatch per statement,
// until a statement finds fewer (sqlstore), then the token rows below the newest
// (which stays, so the AUTO_INCREMENT counter can never fall back, even after a
// restart of an old server that recomputes it from the table).
func (s *Store) Sweep(ctx context.Context) (int, error) {
	total, err := s.sharedRecords.Sweep(ctx)
	if err != nil {
		return total, err
	}
	var newest sql.NullInt64
	if err := s.db.QueryRowContext(ctx, s.q.newestToken).Scan(&newest); err != nil {
		return total, backendErr(ctx, "sweep", err)
	}
	for newest.Valid {
		n, err := exec(ctx, s.db, s.q.sweepTokens, newest.Int64, s.sweepBatch)
		if err != nil {
			return total, backendErr(ctx, "sweep", err)
		}
		if n < int64(s.sweepBatch) {
			break
		}
	}
	return total, nil
}

// ownTx runs fn in a transaction of its own, again if InnoDB rolled it back to break
// a deadlock. idem's errors from fn (ErrLeaseLost, ErrCompleted) pass unchanged;
// driver errors become *idem.BackendError.
func (s *Store) ownTx(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	return finalErr(ctx, op, idemsql.RetrySerializationFailures(ctx, func() error { return s.inTx(ctx, fn) }))
}

func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// finalErr passes idem's own errors and wraps the driver's.
func finalErr(ctx context.Context, op string, err error) error {
	var ie *idem.InputError
	switch {
	case err == nil, errors.Is(err, idem.ErrLeaseLost), errors.Is(err, idem.ErrCompleted), errors.As(err, &ie):
		return err
	}
	return backendErr(ctx, op, err)
}

// backendErr wraps a driver failure. If ctx ended, its error stays matchable with
// errors.Is even when the driver reported the cancellation in its own words.
func backendErr(ctx context.Context, op string, err error) error {
	var be *idem.BackendError
	if errors.As(err, &be) {
		return err
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		err = fmt.Errorf("%w (%w)", err, cerr)
	}
	return &idem.BackendError{Backend: backend, Op: op, Err: err}
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func exec(ctx context.Context, db execer, query string, args ...any) (int64, error) {
	r, err := db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// quote returns the table's name as a quoted identifier; names are checked to be
// lowercase identifiers before they get here.
func quote(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }

// ClaimBatch implements idem.BatchClaimer: the claims run in one transaction, so the
// batch costs one commit, though not one round trip (each claim still sends its own
// statements), in (scope, id) order so that batches sharing keys lock them
// in one order, and are answered in the order given. A later claim of a key earlier
// in the batch sees that claim. If the transaction fails, no claim of the batch took
// effect.
func (s *Store) ClaimBatch(ctx context.Context, claims []idem.Claim) ([]idem.Result, error) {
	return s.tr.ClaimBatch(ctx, claims, func(ctx context.Context) ([]idem.Result, error) { return s.claimBatch(ctx, claims) })
}

// claimBatch is ClaimBatch's body, once its claims are checked.
func (s *Store) claimBatch(ctx context.Context, claims []idem.Claim) ([]idem.Result, error) {
	start := s.m.Start()
	order := storekit.KeyOrder(claims)
	out := make([]idem.Result, len(claims))
	err := s.ownTx(ctx, "claim", func(tx *sql.Tx) error {
		for _, i := range order {
			res, err := s.claim(ctx, tx, claims[i])
			if err != nil {
				return err
			}
			out[i] = res
		}
		return nil
	})
	for i, c := range claims {
		s.m.Claim(c.Key.Scope, out[i].Outcome, err, start)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RecordTx implements idem.TxRecorder: each fresh key is one statement in tx, which
// records it as completed (the inbox's path when its handler runs in the same
// transaction). Keys run in (scope, id) order; a key repeated within claims is
// Acquired once, then Replayed (or Mismatch, for another fingerprint).
func (s *Store) RecordTx(ctx context.Context, tx *sql.Tx, claims []idem.Claim) ([]idem.Outcome, error) {
	return s.RecordResultsTx(ctx, tx, claims, nil)
}

// RecordResultsTx implements idem.TxResultRecorder: RecordTx, storing results[i] as
// the result of claims[i]'s key when it records it.
func (s *Store) RecordResultsTx(ctx context.Context, tx *sql.Tx, claims []idem.Claim, results [][]byte) (out []idem.Outcome, err error) {
	ctx, span := s.tr.Record(ctx, claims)
	defer func() { otelx.EndRecord(span, out, err) }()
	return s.recordBatch(ctx, tx, claims, results)
}

func (s *Store) recordBatch(ctx context.Context, tx *sql.Tx, claims []idem.Claim, results [][]byte) ([]idem.Outcome, error) {
	start := s.m.Start()
	if tx == nil {
		return nil, errNilTx
	}
	if err := storekit.CheckRecordBatch(ctx, claims, results); err != nil {
		return nil, err
	}
	out := make([]idem.Outcome, len(claims))
	first := map[idem.Key]int{}
	for _, i := range storekit.KeyOrder(claims) {
		if _, dup := first[claims[i].Key]; dup {
			continue
		}
		first[claims[i].Key] = i
		o, err := s.record(ctx, tx, claims[i], storekit.ResultAt(results, i))
		if err != nil {
			return nil, backendErr(ctx, "record", err)
		}
		out[i] = o
	}
	storekit.FillRepeats(claims, out, first)
	for i, c := range claims {
		s.m.Claim(c.Key.Scope, out[i], nil, start)
	}
	return out, nil
}
