package idempg

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsql/sqlstore"
	"github.com/idemhq/idem/internal/metrics"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/migrate"
	"github.com/idemhq/idem/storekit"
)

const backend = "postgres"

// maxAttempts bounds how often a claim or release statement is re-run because the row
// changed under it. Each re-run takes a new snapshot, so one is almost always enough;
// running out means the key is churning faster than a statement completes.
const maxAttempts = 8

var errChurn = fmt.Errorf("the row changed under %d consecutive statements", maxAttempts)

// Both stores are the shared Inspector and ScopeLister of sqlstore.
var (
	_ idem.Inspector   = (*Store)(nil)
	_ idem.Inspector   = (*SQLStore)(nil)
	_ idem.ScopeLister = (*Store)(nil)
	_ idem.ScopeLister = (*SQLStore)(nil)
)

// core is the implementation both stores share: Store (pgx) and SQLStore
// (database/sql) differ only in the transaction type and the handle they wrap. The
// Inspector, ScopeLister and Sweeper are sqlstore's, over the driver's RecordsSQL.
type core[Tx any] struct {
	*sharedRecords
	q      queries
	table  string
	db     conn
	txConn func(Tx) conn // nil for a nil Tx: the call fails with errNilTx
	m      *metrics.Store
	tr     otelx.StoreTracer
}

func newCore[Tx, MTx any](ctx context.Context, cfg Config, db conn, txConn func(Tx) conn, mdb idemsql.TxDB[MTx]) (core[Tx], error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return core[Tx]{}, err
	}
	n := namesFor(cfg.Table)
	if !cfg.offline {
		if err := migrate.Ensure(ctx, mdb, cfg.SkipMigrate, migrate.Records(cfg.Table)); err != nil {
			return core[Tx]{}, err
		}
	}
	m, err := metrics.NewStore(cfg.Registerer, backend)
	if err != nil {
		return core[Tx]{}, err
	}
	c := core[Tx]{q: newQueries(n), table: cfg.Table, db: db, txConn: txConn, m: m,
		tr: otelx.NewStoreTracer(cfg.TracerProvider, "postgresql")}
	c.sharedRecords, err = sqlstore.New(mdb, sqlstore.Config{Table: cfg.Table, SweepBatch: cfg.SweepBatch,
		Swept: m.Swept, Registerer: cfg.Registerer})
	return c, err
}

// Claim implements idem.Store.
func (s *core[Tx]) Claim(ctx context.Context, c idem.Claim) (idem.Result, error) {
	ctx, span := s.tr.Claim(ctx, c.Key, false)
	res, err := s.claim(ctx, s.db, c)
	otelx.EndClaim(span, res, err)
	return res, err
}

// ClaimTx implements idem.TxStore: the claim joins tx (a pgx.Tx for Store, a *sql.Tx
// for SQLStore). A concurrent claimant of the same key waits for tx to end. A failed
// statement aborts tx, as any would.
func (s *core[Tx]) ClaimTx(ctx context.Context, tx Tx, c idem.Claim) (idem.Result, error) {
	ctx, span := s.tr.Claim(ctx, c.Key, true)
	res, err := s.claim(ctx, s.txConn(tx), c)
	otelx.EndClaim(span, res, err)
	return res, err
}

// Complete implements idem.Store.
func (s *core[Tx]) Complete(ctx context.Context, k idem.Key, token uint64, result []byte) error {
	ctx, span := s.tr.Op(ctx, otelx.SpanStoreComplete, k, token, false)
	err := s.complete(ctx, s.db, k, token, result)
	otelx.End(span, err)
	return err
}

// CompleteTx implements idem.TxStore: the completion commits or rolls back with tx.
func (s *core[Tx]) CompleteTx(ctx context.Context, tx Tx, k idem.Key, token uint64, result []byte) error {
	ctx, span := s.tr.Op(ctx, otelx.SpanStoreComplete, k, token, true)
	err := s.complete(ctx, s.txConn(tx), k, token, result)
	otelx.End(span, err)
	return err
}

// Release implements idem.Store.
func (s *core[Tx]) Release(ctx context.Context, k idem.Key, token uint64) error {
	ctx, span := s.tr.Op(ctx, otelx.SpanStoreRelease, k, token, false)
	err := s.release(ctx, s.db, k, token)
	otelx.End(span, err)
	return err
}

// ReleaseTx implements idem.TxStore.
func (s *core[Tx]) ReleaseTx(ctx context.Context, tx Tx, k idem.Key, token uint64) error {
	ctx, span := s.tr.Op(ctx, otelx.SpanStoreRelease, k, token, true)
	err := s.release(ctx, s.txConn(tx), k, token)
	otelx.End(span, err)
	return err
}

var errNilTx = &idem.InputError{Field: "tx", Reason: "is nil", Fix: "pass the transaction the business write runs in"}

func (s *core[Tx]) claim(ctx context.Context, cn conn, c idem.Claim) (idem.Result, error) {
	start := s.m.Start()
	if err := c.Validate(); err != nil {
		return idem.Result{}, err
	}
	if cn == nil {
		return idem.Result{}, errNilTx
	}
	if err := ctx.Err(); err != nil {
		return idem.Result{}, err
	}
	res, err := s.claimLoop(ctx, cn, c)
	s.m.Claim(c.Key.Scope, res.Outcome, err, start)
	return res, err
}

// claimLoop inserts, and when the key exists reads it, taking over an expired row on
// the way; see insertSQL, readSQL and takeoverSQL for when a step does not answer.
func (s *core[Tx]) claimLoop(ctx context.Context, cn conn, c idem.Claim) (idem.Result, error) {
	args := claimArgs(c)
	for range maxAttempts {
		res, acquired, err := scanInsert(cn.queryRow(ctx, s.q.insert, args...))
		if err != nil {
			return idem.Result{}, backendErr(ctx, "claim", err)
		}
		if acquired {
			return res, nil
		}
		res, st, err := scanExisting(cn.queryRow(ctx, s.q.read, c.Key.Scope, c.Key.ID), c)
		if err != nil {
			return idem.Result{}, backendErr(ctx, "claim", err)
		}
		switch st {
		case claimAnswered:
			return res, nil
		case claimExpired:
			res, acquired, err := scanInsert(cn.queryRow(ctx, s.q.takeover, args...))
			if err != nil {
				return idem.Result{}, backendErr(ctx, "claim", err)
			}
			if acquired {
				return res, nil
			}
			// Another claimant took it over, or the sweeper removed it: ask again.
		}
	}
	return idem.Result{}, backendErr(ctx, "claim", errChurn)
}

func claimArgs(c idem.Claim) []any {
	c = c.WithDefaults()
	return []any{c.Key.Scope, c.Key.ID, c.Fingerprint, micros(c.Lease), micros(c.Retention)}
}

// micros rounds d up to whole microseconds, Postgres's resolution, so a lease is
// never shorter than asked.
func micros(d time.Duration) int64 {
	us := int64(d / time.Microsecond)
	if d%time.Microsecond != 0 {
		us++
	}
	return us
}

// scanInsert reads the token of insertSQL or takeoverSQL; acquired is false when the
// statement returned no row (the key is taken).
func scanInsert(r row) (res idem.Result, acquired bool, err error) {
	var token int64
	switch err := r.Scan(&token); {
	case errors.Is(err, sql.ErrNoRows):
		return idem.Result{}, false, nil
	case err != nil:
		return idem.Result{}, false, err
	}
	return idem.Result{Outcome: idem.Acquired, Token: uint64(token)}, true, nil
}

// What readSQL established.
type claimStatus int

const (
	claimAnswered claimStatus = iota // a live duplicate
	claimExpired                     // the row expired: take it over
	claimNoRow                       // the row is gone: insert again
)

// scanExisting reads readSQL's row.
func scanExisting(r row, c idem.Claim) (idem.Result, claimStatus, error) {
	var (
		expired bool
		state   int16
		token   int64
		rec     idem.Record
	)
	err := r.Scan(&state, &rec.Fingerprint, &token, &rec.Result, &rec.CreatedAt, &rec.ExpiresAt, &expired)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return idem.Result{}, claimNoRow, nil
	case err != nil:
		return idem.Result{}, claimNoRow, err
	case expired:
		return idem.Result{}, claimExpired, nil
	}
	rec.State = idem.StateInProgress
	if state == stateCompleted {
		rec.State = idem.StateCompleted
	}
	return storekit.Existing(c, rec), claimAnswered, nil
}

func (s *core[Tx]) complete(ctx context.Context, cn conn, k idem.Key, token uint64, result []byte) error {
	if err := checkFinish(ctx, cn, k, token); err != nil {
		return err
	}
	n, err := cn.exec(ctx, s.q.complete, k.Scope, k.ID, tokenArg(token), result)
	if err != nil {
		return backendErr(ctx, "complete", err)
	}
	if n == 0 {
		return idem.ErrLeaseLost
	}
	return nil
}

func (s *core[Tx]) release(ctx context.Context, cn conn, k idem.Key, token uint64) error {
	if err := checkFinish(ctx, cn, k, token); err != nil {
		return err
	}
	return answerLoop(ctx, "release", cn, s.q.release, k.Scope, k.ID, tokenArg(token))
}

// Renew implements idem.Renewer. It works on committed claims: a claim still inside
// an open ClaimTx transaction is invisible to it (ErrLeaseLost), and needs no renewal,
// since concurrent claimants wait for that transaction anyway.
func (s *core[Tx]) Renew(ctx context.Context, k idem.Key, token uint64, lease time.Duration) error {
	return s.tr.Renew(ctx, k, token, lease, func(ctx context.Context, lease time.Duration) error {
		return answerLoop(ctx, "renew", s.db, s.q.renew, k.Scope, k.ID, tokenArg(token), micros(lease))
	})
}

// answerLoop runs releaseSQL or renewSQL until it answers (see their answers), at
// most maxAttempts times.
func answerLoop(ctx context.Context, op string, cn conn, query string, args ...any) error {
	for range maxAttempts {
		var answer int
		if err := cn.queryRow(ctx, query, args...).Scan(&answer); err != nil {
			return backendErr(ctx, op, err)
		}
		switch answer {
		case answerDone:
			return nil
		case answerCompleted:
			return idem.ErrCompleted
		case answerLost:
			return idem.ErrLeaseLost
		}
	}
	return backendErr(ctx, op, errChurn)
}

// tokenArg maps a token to the bigint column. Tokens above MaxInt64 were never
// issued; they become negative, which no row holds, so they fence like any stranger.
func tokenArg(token uint64) int64 { return int64(token) }

func checkFinish(ctx context.Context, cn conn, k idem.Key, token uint64) error {
	if err := storekit.CheckFinish(ctx, k, token); err != nil {
		return err
	}
	if cn == nil {
		return errNilTx
	}
	return nil
}

// backendErr wraps a driver failure. If ctx ended, its error stays matchable with
// errors.Is even when the driver reported the cancellation in its own words.
func backendErr(ctx context.Context, op string, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		err = fmt.Errorf("%w (%w)", err, cerr)
	}
	return &idem.BackendError{Backend: backend, Op: op, Err: err}
}
