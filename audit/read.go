package audit

import (
	"context"

	"github.com/idemhq/idem/idemsql"
)

// reader runs reads on one database: outside any transaction where its TxDB can
// (TxDB.Read: on SQLite they then queue behind no writer), else each statement
// in its own autocommit.
type reader func(ctx context.Context, fn func(idemsql.Querier) error) error

func readerOf[Tx any](db idemsql.TxDB[Tx]) reader {
	return func(ctx context.Context, fn func(idemsql.Querier) error) error {
		if db.Read != nil {
			return db.Read(ctx, fn)
		}
		return db.Auto(ctx, fn)
	}
}

// each runs query and hands each row to scan; reset, if set, runs first (a read
// may be tried again: what a try collected must start over).
func (r reader) each(ctx context.Context, query string, args []any, reset func(), scan func(idemsql.Rows) error) error {
	return r(ctx, func(q idemsql.Querier) error {
		if reset != nil {
			reset()
		}
		return idemsql.EachRow(ctx, q, query, args, scan)
	})
}
