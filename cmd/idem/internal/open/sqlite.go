package open

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/outbox"
)

// SQLite opens the SQLite file at path as idemsqlite.Open does
// (idemsqlite.DSN): WAL, so a service's writes and the relay's reads do not block
// each other, a busy timeout, immediate transactions.
func SQLite(path string) (*sql.DB, error) {
	return sql.Open("sqlite", idemsqlite.DSN(path, idemsqlite.Config{}))
}

// openSQLiteStore is serve's --store sqlite:PATH.
func openSQLiteStore(ctx context.Context, s StoreSpec, reg prometheus.Registerer) (idem.Store, func(), error) {
	st, err := idemsqlite.Open(ctx, s.Path, idemsqlite.Config{Registerer: reg})
	if err != nil {
		return nil, nil, fmt.Errorf("--store %s: %w", s.Desc, err)
	}
	return st, func() { _ = st.Close() }, nil
}

// openSQLiteRelay is relay's --db sqlite:PATH: the outbox of the service's file,
// polled.
func openSQLiteRelay(ctx context.Context, db DBSpec, sink idem.Sink, cfg outbox.RelayConfig) (*RelayDB, error) {
	sdb, err := SQLite(db.Path)
	if err != nil {
		return nil, fmt.Errorf("--db %s: %w", db.Desc, err)
	}
	rd := &RelayDB{Close: func() { sdb.Close() }}
	txdb, err := idemsql.SQLDB(ctx, sdb)
	var ob *outbox.Outbox[*sql.Tx]
	if err == nil {
		ob, err = outbox.New(ctx, txdb, outbox.Config{})
	}
	if err != nil {
		rd.Close()
		return nil, fmt.Errorf("--db %s: %w", db.Desc, err)
	}
	return withRelay(rd, ob, txdb, sink, cfg)
}

// openVerifySQLite is verify's --db sqlite:[PATH]: a new file (a temporary one,
// removed after unless keep, when PATH is empty) whose store runs on a chaos.Clock
// the run makes jump.
func openVerifySQLite(ctx context.Context, raw string, keep bool) (*Database, error) {
	path := strings.TrimPrefix(raw, "sqlite:")
	name := "sqlite " + path
	cleanup := func() {}
	if path == "" {
		dir, err := os.MkdirTemp("", "idem-verify-")
		if err != nil {
			return nil, err
		}
		path, name = filepath.Join(dir, "idem.db"), "sqlite (temporary file)"
		if keep {
			name = "sqlite " + path
		} else {
			cleanup = func() { os.RemoveAll(dir) }
		}
	} else if _, err := os.Stat(path); err == nil {
		return nil, fmt.Errorf("--db %s: the file exists; a run needs a database of its own: name a new file, or use sqlite: for a temporary one", raw)
	}
	clock := &chaos.Clock{}
	s, err := idemsqlite.Open(ctx, path, idemsqlite.Config{Now: clock.Now})
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("--db %s: %w", raw, err)
	}
	// One writer at a time: SQLite serializes writers anyway, and a few
	// connections queue in database/sql (FIFO) instead of sleeping in
	// SQLite's busy handler, which backs off up to 100 ms per try.
	s.DB().SetMaxOpenConns(3)
	return &Database{Name: name, DB: s.DB(), Store: s, Clock: clock, Close: func() { s.Close(); cleanup() }}, nil
}
