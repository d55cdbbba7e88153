package idemsqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsql/sqlstore"
	"github.com/idemhq/idem/internal/metrics"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/migrate"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

const backend = "sqlite"

// Store is an idem.Store and idem.TxStore[*sql.Tx] on one SQLite file. Create it with
// Open or New; it is safe for concurrent use.
type Store struct {
	// sharedRecords is the Inspector and ScopeLister every SQL store shares; Sweep is
	// this store's own, through the writer.
	*sharedRecords

	db    *sql.DB
	ownDB bool // Open made db, so Close closes it
	cfg   Config
	path  string // the database file, for errors that name its volume; "" if unknown
	m     *metrics.Store
	tr    otelx.StoreTracer

	// floor is the highest token this process issued. The idem_meta row is the
	// durable floor; this one also covers tokens whose transaction rolled back, so a
	// holder whose ClaimTx was rolled back can never match a later claim's token.
	floor atomic.Uint64

	w  *writer
	st *stmts // prepared on db, for callers' transactions

	// mu guards closed against enqueues racing Close: senders hold it shared while
	// they hand an op to the writer, Close holds it exclusively to close the queue.
	mu     sync.RWMutex
	closed bool
	once   sync.Once
	err    error
}

var (
	_ idem.Store            = (*Store)(nil)
	_ idem.TxStore[*sql.Tx] = (*Store)(nil)
	_ idem.Sweeper          = (*Store)(nil)
	_ idem.BatchClaimer     = (*Store)(nil)
	_ idem.Renewer          = (*Store)(nil)
	_ idem.Inspector        = (*Store)(nil)
	_ idem.ScopeLister      = (*Store)(nil)
)

// Open opens the SQLite database at path, creating it if needed, migrates the idem
// tables and starts the group-commit writer. Every connection runs in WAL mode with
// synchronous=FULL (Config.Synchronous may relax it), busy_timeout, foreign keys on,
// and _txlock=immediate, so a transaction from Store.DB() takes the write lock at
// BEGIN: a concurrent claimant of the same key then waits for it instead of failing.
func Open(ctx context.Context, path string, cfg Config) (*Store, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := checkPath(path); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", DSN(path, cfg))
	if err != nil {
		return nil, &idem.BackendError{Backend: backend, Op: "open", Err: err}
	}
	s, err := newStore(ctx, db, cfg, true)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

func checkPath(path string) error {
	switch {
	case path == "":
		return &idem.InputError{Field: "path", Reason: "is empty", Fix: "name the database file, e.g. \"idem.db\""}
	case strings.Contains(path, ":memory:") || strings.Contains(path, "mode=memory"):
		return &idem.InputError{Field: "path", Reason: fmt.Sprintf("names an in-memory database (%q)", path),
			Fix: "use a file (an in-memory SQLite database is private to one connection, and the store uses several); for a memory store use idemmem"}
	}
	return nil
}

// DSN is the database/sql data source name Open uses for the file at path, for
// sql.Open("sqlite", DSN(path, cfg)) beside a Store or before New: a file: URI (so
// '?', '#' and '%' in the path stay part of the name) in WAL mode, with cfg's
// Synchronous and BusyTimeout (DefaultBusyTimeout when zero), foreign keys on and
// _txlock=immediate.
func DSN(path string, cfg Config) string {
	if cfg.BusyTimeout <= 0 {
		cfg.BusyTimeout = DefaultBusyTimeout
	}
	esc := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	return fmt.Sprintf("file:%s?_pragma=journal_mode(WAL)&_pragma=synchronous(%s)&_pragma=busy_timeout(%d)"+
		"&_pragma=foreign_keys(1)&_txlock=immediate", esc, cfg.Synchronous.pragma(), cfg.BusyTimeout.Milliseconds())
}

// New returns a Store on the caller's database, migrating the idem tables into it.
// Open is simpler; New is for applications that open the file themselves. The
// caller's DSN should set what Open sets: journal_mode(WAL) so readers never block
// the writer, busy_timeout so concurrent writers wait instead of failing, and
// _txlock=immediate so that ClaimTx in a deferred transaction cannot fail with
// SQLITE_BUSY when another writer commits between its read and its write. The
// group-commit writer keeps one connection of db for itself and sets
// Config.Synchronous and Config.BusyTimeout on it, so db must allow at least two
// open connections. Close stops the writer but leaves db open.
func New(ctx context.Context, db *sql.DB, cfg Config) (*Store, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if db == nil {
		return nil, &idem.InputError{Field: "db", Reason: "is nil", Fix: "pass an open *sql.DB, or use idemsqlite.Open"}
	}
	if n := db.Stats().MaxOpenConnections; n == 1 {
		return nil, &idem.InputError{Field: "db", Reason: "allows one open connection (SetMaxOpenConns(1))",
			Fix: "allow at least 2: the group-commit writer keeps one connection for itself"}
	}
	return newStore(ctx, db, cfg, false)
}

func newStore(ctx context.Context, db *sql.DB, cfg Config, ownDB bool) (*Store, error) {
	if err := migrate.Ensure(ctx, idemsql.SQLDBFor(Driver(), db), cfg.SkipMigrate, migrate.Records(migrate.DefaultRecordsTable)); err != nil {
		return nil, err
	}
	m, err := metrics.NewStore(cfg.Registerer, backend)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, ownDB: ownDB, cfg: cfg, m: m, tr: otelx.NewStoreTracer(cfg.TracerProvider, backend)}
	var last int64
	if err := db.QueryRowContext(ctx, "SELECT last_token FROM idem_meta WHERE id = 1").Scan(&last); err != nil {
		return nil, &idem.BackendError{Backend: backend, Op: "open", Err: err}
	}
	s.floor.Store(uint64(last))
	// The main database's file, for an error that says which volume is full. An
	// empty name (a temporary database) leaves the error without it.
	_ = db.QueryRowContext(ctx, "SELECT file FROM pragma_database_list WHERE name = 'main'").Scan(&s.path)
	if s.st, err = prepare(ctx, db); err != nil {
		return nil, &idem.BackendError{Backend: backend, Op: "open", Err: err}
	}
	if s.w, err = startWriter(ctx, s); err != nil {
		_ = s.st.close()
		return nil, &idem.BackendError{Backend: backend, Op: "open", Err: err}
	}
	s.sharedRecords, err = sqlstore.New(idemsql.SQLDBFor(Driver(), db), sqlstore.Config{Table: migrate.DefaultRecordsTable,
		SweepBatch: cfg.SweepBatch, Registerer: cfg.Registerer})
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// DB returns the database the store lives in, for the caller's business
// transactions: pass the *sql.Tx to ClaimTx and CompleteTx so the key commits with
// the effect. It stays valid until Close.
func (s *Store) DB() *sql.DB { return s.db }

// Close stops the group-commit writer after it has applied every call already
// queued, then closes the database if Open opened it. Calls after Close return
// idem.ErrClosed. Close is idempotent.
func (s *Store) Close() error {
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.err = errors.Join(s.w.stop(), s.st.close())
		if s.ownDB {
			s.err = errors.Join(s.err, s.db.Close())
		}
	})
	return s.err
}

// Stats counts the group-commit writer's work since the store was opened.
type Stats struct {
	// Commits is the number of transactions the writer committed.
	Commits uint64
	// Ops is the number of calls (claims, batch claims, completions, releases, sweep
	// steps) applied in them. Ops/Commits is the average group size.
	Ops uint64
}

// Stats returns the writer's counters.
func (s *Store) Stats() Stats {
	return Stats{Commits: s.w.commits.Load(), Ops: s.w.ops.Load()}
}

func (s *Store) nowNs() int64 { return s.cfg.Now().UnixNano() }

// issue returns a token above the clock in microseconds, above atLeast-1 and above
// every token this process issued. Tokens read as times, so they also rise across a
// restart whose idem_meta row was lost with an unsynced commit.
func (s *Store) issue(now int64, atLeast uint64) uint64 {
	for {
		last := s.floor.Load()
		t := max(uint64(max(now, 0)/1000), last+1, atLeast)
		if s.floor.CompareAndSwap(last, t) {
			return t
		}
	}
}

// raiseFloor records that token t was issued (possibly by the durable floor).
func (s *Store) raiseFloor(t uint64) {
	for {
		last := s.floor.Load()
		if t <= last || s.floor.CompareAndSwap(last, t) {
			return
		}
	}
}

func (s *Store) backendErr(ctx context.Context, op string, err error) error {
	err = explain(err, s.path)
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		err = fmt.Errorf("%w: %w", cerr, err)
	}
	return &idem.BackendError{Backend: backend, Op: op, Err: err}
}
