package open

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/redact"
)

// SQLDB opens the database of --db for migrate and the operator commands. Unlike
// the relay's, a SQLite file need not exist yet: migrate up creates it.
func SQLDB(ctx context.Context, raw string) (idemsql.TxDB[*sql.Tx], func(), error) {
	return sqlDB(ctx, "--db", raw)
}

// sqlDB is SQLDB for the flag named flag.
func sqlDB(ctx context.Context, flag, raw string) (idemsql.TxDB[*sql.Tx], func(), error) {
	if err := cli.CheckURL(flag, raw); err != nil {
		return idemsql.TxDB[*sql.Tx]{}, nil, err
	}
	var db *sql.DB
	var err error
	switch {
	case strings.HasPrefix(raw, "mysql://"):
		dsn, derr := idemmysql.DSN(raw)
		if derr != nil {
			return idemsql.TxDB[*sql.Tx]{}, nil, fmt.Errorf("%s: %w", flag, derr)
		}
		db, err = sql.Open("mysql", dsn)
	case DialectOf(raw) == "postgres":
		db, err = sql.Open("pgx", raw)
	case DialectOf(raw) == "sqlite":
		path := strings.TrimPrefix(raw, "sqlite:")
		if path == "" {
			return idemsql.TxDB[*sql.Tx]{}, nil, fmt.Errorf("%s sqlite: needs a path, such as sqlite:./app.db", flag)
		}
		db, err = SQLite(path)
	default:
		return idemsql.TxDB[*sql.Tx]{}, nil, fmt.Errorf("%s %q: unknown database; use postgres://user@host:5432/db, mysql://user@host:3306/db or sqlite:PATH", flag, redact.URL(raw))
	}
	if err != nil {
		return idemsql.TxDB[*sql.Tx]{}, nil, fmt.Errorf("%s %s: %w", flag, redact.URL(raw), err)
	}
	tdb, err := idemsql.SQLDB(ctx, db)
	if err != nil {
		db.Close()
		return idemsql.TxDB[*sql.Tx]{}, nil, fmt.Errorf("%s %s: %w", flag, redact.URL(raw), err)
	}
	return tdb, func() { db.Close() }, nil
}
