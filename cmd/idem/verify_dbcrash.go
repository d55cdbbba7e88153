package main

import (
	"context"
	"fmt"

	"github.com/idemhq/idem/cmd/idem/internal/verify"
	"github.com/idemhq/idem/internal/mariadbproc"
	"github.com/idemhq/idem/internal/pgcluster"
)

// The values of --db that start a private server in a temporary directory, which
// the run owns and so may kill (--db-crash).
const (
	privatePostgres = "postgres:"
	privateMySQL    = "mysql:"
)

// checkDBCrash validates --db-crash against --db.
func (o *verifyOptions) checkDBCrash() error {
	switch {
	case o.dbCrash < 0:
		return fmt.Errorf("--db-crash must be 0 or more (got %d)", o.dbCrash)
	case o.dbCrash == 0 || o.db == privatePostgres || o.db == privateMySQL:
		return nil
	case o.db == "" || len(o.db) >= 7 && o.db[:7] == "sqlite:":
		return fmt.Errorf("--db-crash %d with --db %s: a crash of the embedded database is a crash of the process: see the consumer/relay kills the run already injects; "+
			"for a database server's crash pass --db postgres: or --db mysql: (a private server the run starts, kills and restarts)", o.dbCrash, o.db)
	}
	return fmt.Errorf("--db-crash %d needs a database server the run owns, to kill it: pass --db postgres: (a private PostgreSQL) or --db mysql: (a private MariaDB), "+
		"not a server URL", o.dbCrash)
}

// privateDB starts the private server of --db postgres: or --db mysql: and points
// o.db at it. It returns what kills and restarts it (for --db-crash) and what
// stops it; for any other --db, nil and a no-op.
func (m *Main) privateDB(ctx context.Context, o *verifyOptions) (verify.DBCrasher, func(), error) {
	switch o.db {
	case privatePostgres:
		fmt.Fprintln(m.Stderr, "idem verify: starting a private PostgreSQL in a temporary directory")
		c, err := pgcluster.Start(ctx, pgcluster.Options{})
		if err != nil {
			return nil, nil, fmt.Errorf("idem verify --db postgres:: %w", err)
		}
		o.db = c.URL
		return c, func() { _ = c.Stop(context.WithoutCancel(ctx)) }, nil
	case privateMySQL:
		fmt.Fprintln(m.Stderr, "idem verify: starting a private MariaDB in a temporary directory")
		s, err := mariadbproc.Start(ctx, mariadbproc.Options{})
		if err != nil {
			return nil, nil, fmt.Errorf("idem verify --db mysql:: %w", err)
		}
		o.db = s.URL
		return s, func() { _ = s.Stop() }, nil
	}
	return nil, func() {}, nil
}
