package idempg

import (
	"context"
	"database/sql"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
)

// SQLStore is an idem.Store on a database/sql handle, with the transactional twins of
// its calls for *sql.Tx. It runs the same statements as Store; use it when the
// application's transactions are database/sql ones (pgx's stdlib driver is tested;
// any Postgres driver that takes $n placeholders and bytea as []byte should work).
type SQLStore struct {
	core[*sql.Tx]
}

var (
	_ idem.Store                     = (*SQLStore)(nil)
	_ idem.TxResultRecorder[*sql.Tx] = (*SQLStore)(nil)
	_ idem.TxStore[*sql.Tx]          = (*SQLStore)(nil)
	_ idem.Sweeper                   = (*SQLStore)(nil)
	_ idem.Renewer                   = (*SQLStore)(nil)
)

// NewSQL returns an SQLStore on db, migrating as New does. Size db with
// SetMaxOpenConns: database/sql opens a connection per concurrent call by default.
// Behind a pooler in transaction mode, a handle on pgx's stdlib driver that caches
// statements (the default) or runs in describe_exec mode is refused as New refuses
// such a pool.
func NewSQL(ctx context.Context, db *sql.DB, cfg Config) (*SQLStore, error) {
	if db == nil {
		return nil, &idem.InputError{Field: "db", Reason: "is nil", Fix: `pass a handle from sql.Open("pgx", url)`}
	}
	if err := checkSQLDB(ctx, db, "idempg.NewSQL db"); err != nil {
		return nil, err
	}
	c, err := newCore(ctx, cfg, sqlConn{db}, sqlTxConn, idemsql.SQLDBFor(Driver(), db))
	if err != nil {
		return nil, err
	}
	return &SQLStore{core: c}, nil
}

func sqlTxConn(tx *sql.Tx) conn {
	if tx == nil {
		return nil
	}
	return sqlConn{tx}
}
