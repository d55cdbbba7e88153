package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsqlite"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for postgres:// URLs
)

// txEnv is a SQL database and the idem TxStore on it, as chosen by a --db URL.
type txEnv struct {
	name   string // for reports: "sqlite (/tmp/…)", "postgres"
	db     *sql.DB
	store  idem.TxStore[*sql.Tx]
	tables string // prefix for the tables a flow creates
	close  func()
}

// openTxEnv maps a URL to a database and its transactional store:
//
//	sqlite:PATH    SQLite file at PATH (created); "sqlite:" alone uses a temporary file
//	postgres://…   PostgreSQL; the flow's tables go into a fresh schema, dropped after
func openTxEnv(ctx context.Context, url string) (*txEnv, error) {
	switch {
	case strings.HasPrefix(url, "sqlite:"):
		path := strings.TrimPrefix(url, "sqlite:")
		name := "sqlite (" + path + ")"
		cleanup := func() {}
		if path == "" {
			name = "sqlite (temporary file)"
			dir, err := os.MkdirTemp("", "idem-verify-")
			if err != nil {
				return nil, err
			}
			path = filepath.Join(dir, "idem.db")
			cleanup = func() { os.RemoveAll(dir) }
		}
		s, err := idemsqlite.Open(path, idemsqlite.Config{})
		if err != nil {
			cleanup()
			return nil, fmt.Errorf("open %s: %w", url, err)
		}
		prefix := "run_" + randomHex(4) + "_"
		return &txEnv{name: name, db: s.DB(), store: s, tables: prefix,
			close: func() { s.Close(); cleanup() }}, nil

	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		db, err := sql.Open("pgx", url)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", url, err)
		}
		s, err := idempg.NewSQL(ctx, db, idempg.Config{})
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("open %s: %w", url, err)
		}
		schema := "idem_verify_" + randomHex(6)
		if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
			db.Close()
			return nil, fmt.Errorf("create schema for the run: %w", err)
		}
		return &txEnv{name: "postgres", db: db, store: s, tables: schema + ".",
			close: func() {
				_, _ = db.ExecContext(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
				db.Close()
			}}, nil
	}
	return nil, fmt.Errorf("--db %q: unknown database; use sqlite:PATH or postgres://user@host/db", url)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
