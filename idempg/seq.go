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
	return idemseq.NewSQLTracker(ctx, TxDB(pool), cfg)
}
