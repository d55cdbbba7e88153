package outbox

import (
	"context"
	"errors"

	"github.com/idemhq/idem/idemsql"
)

// roundSingleWriter reads a batch, publishes it without holding the database's
// write lock (so producers keep writing), then marks it in a short transaction, on
// a database with one writer at a time (OutboxSQL.SingleWriter: SQLite). One relay
// per database.
func (r *Relay[Tx]) roundSingleWriter(ctx context.Context) (int, error) {
	var rows []row
	err := r.o.db.InTx(ctx, func(tx Tx) (err error) {
		rows, err = r.claim(ctx, r.o.db.Querier(tx), r.o.stmts.Claim)
		return err
	})
	if err != nil || len(rows) == 0 {
		return 0, r.wrapErr(err)
	}
	// Publish with no transaction open: a write transaction holds the only write
	// lock, and a slow or unreachable broker would stall every writer of the
	// database for as long as the publish takes. Each mark commits on its own.
	n, err := r.publish(ctx, shortTx[Tx]{r.o.db}, rows)
	return n, r.wrapErr(err)
}

// shortTx runs each statement in a transaction of its own.
type shortTx[Tx any] struct{ db idemsql.TxDB[Tx] }

func (s shortTx[Tx]) Exec(ctx context.Context, query string, args ...any) (n int64, err error) {
	err = s.db.InTx(ctx, func(tx Tx) error {
		n, err = s.db.Querier(tx).Exec(ctx, query, args...)
		return err
	})
	return n, err
}

func (s shortTx[Tx]) Query(ctx context.Context, query string, args ...any) (idemsql.Rows, error) {
	return nil, errors.New("outbox: internal error: Query outside a transaction")
}

func (s shortTx[Tx]) QueryRow(ctx context.Context, query string, args ...any) idemsql.Row {
	return errRow{errors.New("outbox: internal error: QueryRow outside a transaction")}
}

type errRow struct{ err error }

func (e errRow) Scan(...any) error { return e.err }
