package idempg

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/idemseq"
)

// NewSeqTracker returns an idemseq tracker keeping producers' sequence windows in the
// table idem_sequences of pool's database, created if missing. Its CheckTx takes the
// caller's pgx.Tx, so a sequence number is recorded exactly when the effect commits:
//
//	tx, _ := pool.Begin(ctx)
//	v, err := tracker.CheckTx(ctx, tx, msg.Producer, msg.Epoch, msg.Seq)
//	if v == idemseq.Accepted { apply(ctx, tx, msg) }
//	tx.Commit(ctx)
func NewSeqTracker(ctx context.Context, pool *pgxpool.Pool, cfg idemseq.Config) (*idemseq.SQLTracker[pgx.Tx], error) {
	return idemseq.NewSQLTracker(ctx, idemseq.Conn[pgx.Tx]{
		Dialect:  idemseq.Postgres,
		Backend:  backend,
		Begin:    func(ctx context.Context) (pgx.Tx, error) { return pool.Begin(ctx) },
		Commit:   func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) },
		Rollback: func(ctx context.Context, tx pgx.Tx) error { return tx.Rollback(ctx) },
		Querier:  SeqTx,
	}, cfg)
}

// SeqTx adapts a pgx transaction to idemseq.Querier.
func SeqTx(tx pgx.Tx) idemseq.Querier { return seqQuerier{tx} }

type seqQuerier struct{ tx pgx.Tx }

func (q seqQuerier) QueryRow(ctx context.Context, query string, args ...any) idemseq.Row {
	return q.tx.QueryRow(ctx, query, args...)
}

func (q seqQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := q.tx.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}
