package idempg

import (
	"database/sql"

	"github.com/idemhq/idem/idemsql"
)

func init() { idemsql.Register(Driver()) }

// Driver returns the Postgres driver: the statements idem runs on its own tables in
// this database. SQLDB finds it once this package is imported; TxDB builds a
// TxDB with it directly.
func Driver() idemsql.Driver { return driver{} }

type driver struct{}

func (driver) Dialect() idemsql.Dialect { return idemsql.Postgres }

// SQLTxDB returns the TxDB of a database/sql handle to PostgreSQL, with this package's
// Driver: how idem's transactional components begin, commit and query its
// transactions.
func SQLTxDB(db *sql.DB) idemsql.TxDB[*sql.Tx] { return idemsql.SQLDBFor(Driver(), db) }
