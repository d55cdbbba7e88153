package sqlstore_test

import (
	"database/sql"
	"errors"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsql/sqlstore"
	"github.com/idemhq/idem/idemsqlite"
)

func TestNewNamesTheBadField(t *testing.T) {
	t.Parallel()
	db := idemsqlite.TxDB(&sql.DB{}) // never used: New runs no statement
	for _, c := range []struct {
		db    idemsql.TxDB[*sql.Tx]
		cfg   sqlstore.Config
		field string
	}{
		{db, sqlstore.Config{SweepBatch: 1}, "sqlstore.Config.Table"},
		{db, sqlstore.Config{Table: "idem_records"}, "sqlstore.Config.SweepBatch"},
		{idemsql.TxDB[*sql.Tx]{}, sqlstore.Config{Table: "idem_records", SweepBatch: 1}, "TxDB.Driver"},
	} {
		_, err := sqlstore.New(c.db, c.cfg)
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("New(%+v) = %v, want an *idem.InputError on %s", c.cfg, err, c.field)
		}
	}
	if _, err := sqlstore.New(db, sqlstore.Config{Table: "idem_records", SweepBatch: 1}); err != nil {
		t.Errorf("New with a whole Config: %v", err)
	}
}
