package idempg

import (
	"context"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/storekit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store is an idem.Store on a pgx pool, with the transactional twins of its calls for
// pgx.Tx. Create it with New; it is safe for concurrent use and owns nothing it must
// close (the pool stays the caller's).
type Store struct {
	core[pgx.Tx]
	pool *pgxpool.Pool
}

var (
	_ idem.Store                    = (*Store)(nil)
	_ idem.TxResultRecorder[pgx.Tx] = (*Store)(nil)
	_ idem.TxStore[pgx.Tx]          = (*Store)(nil)
	_ idem.Sweeper                  = (*Store)(nil)
	_ idem.BatchClaimer             = (*Store)(nil)
	_ idem.Renewer                  = (*Store)(nil)
)

// New returns a Store on pool. Unless cfg.SkipMigrate is set it first creates or
// upgrades the table, serialized with other processes doing the same; a failure
// there is an *idem.BackendError with Op "migrate". A bad cfg is an *idem.InputError
// naming the field, as is a pool that caches statements (pgx's default) or runs in
// describe_exec mode behind a pooler in transaction mode such as PgBouncer's: set
// default_query_exec_mode=exec in its connection string there (docs/operating.md,
// "Behind PgBouncer").
func New(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Store, error) {
	if pool == nil {
		return nil, &idem.InputError{Field: "pool", Reason: "is nil", Fix: "pass a pool from pgxpool.New"}
	}
	if err, _ := checkPool(ctx, pool, "idempg.New pool"); err != nil {
		return nil, err
	}
	c, err := newCore(ctx, cfg, pgxConn{pool}, pgxTxConn, TxDB(pool))
	if err != nil {
		return nil, err
	}
	return &Store{core: c, pool: pool}, nil
}

func pgxTxConn(tx pgx.Tx) conn {
	if tx == nil {
		return nil
	}
	return pgxConn{tx}
}

// ClaimBatch implements idem.BatchClaimer: the claims go to the server in one round
// trip (a pgx pipeline, which runs as one implicit transaction) and are answered in
// the order given. A later claim of a key earlier in the batch sees that claim.
//
// The statements run in (scope, id) order, whatever the order of claims, so that two
// batches sharing keys lock them in the same order and cannot deadlock. If the
// pipeline fails, no claim of the batch took effect. A claim whose row was committed
// by another session while the pipeline ran is asked again on its own; if that
// fails, the error is returned and the keys the batch acquired stay claimed until
// their leases end.
func (s *Store) ClaimBatch(ctx context.Context, claims []idem.Claim) ([]idem.Result, error) {
	return s.tr.ClaimBatch(ctx, claims, func(ctx context.Context) ([]idem.Result, error) { return s.claimBatch(ctx, claims) })
}

// claimBatch is ClaimBatch's body, once its claims are checked.
func (s *Store) claimBatch(ctx context.Context, claims []idem.Claim) ([]idem.Result, error) {
	start := s.m.Start()
	out := make([]idem.Result, len(claims))
	if len(claims) == 0 {
		return out, nil
	}
	answered, err := s.sendBatch(ctx, claims, out)
	if err != nil {
		err = backendErr(ctx, "claim", err)
		for _, c := range claims {
			s.m.Claim(c.Key.Scope, 0, err, start)
		}
		return nil, err
	}
	for i, c := range claims {
		if !answered[i] { // rare: a row committed under the pipeline, or expired; alone
			out[i], err = s.claimLoop(ctx, s.db, c)
		}
		s.m.Claim(c.Key.Scope, out[i].Outcome, err, start)
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// sendBatch runs the claims as one pipeline and fills out; answered[i] is false where
// claimSQL did not answer (no visible row, or an expired row to take over).
func (s *Store) sendBatch(ctx context.Context, claims []idem.Claim, out []idem.Result) ([]bool, error) {
	order := storekit.KeyOrder(claims)
	// Each claim is its insert and its read; in the batch's implicit transaction the
	// read sees the insert before it, so one round trip answers every claim.
	b := &pgx.Batch{}
	for _, i := range order {
		b.Queue(s.q.insert, claimArgs(claims[i])...)
		b.Queue(s.q.read, claims[i].Key.Scope, claims[i].Key.ID)
	}
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	answered := make([]bool, len(claims))
	for _, i := range order {
		res, acquired, err := scanInsert(br.QueryRow())
		if err != nil {
			return nil, err
		}
		existing, st, err := scanExisting(br.QueryRow(), claims[i])
		if err != nil {
			return nil, err
		}
		if acquired {
			out[i], answered[i] = res, true
		} else {
			out[i], answered[i] = existing, st == claimAnswered
		}
	}
	return answered, br.Close()
}
