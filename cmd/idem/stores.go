package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/internal/redact"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for postgres:// URLs
)

// verifyDB is the database of a verify run and the idem TxStore on it.
type verifyDB struct {
	name  string // for reports: "sqlite (temporary file)", "postgres"
	db    *sql.DB
	store idem.TxStore[*sql.Tx]
	clock *chaos.Clock // drives the store's expiry; nil where the database's clock does
	proxy *chaos.Proxy // the database connections go through it; nil for SQLite
	close func()
}

// openVerifyDB maps --db to a database the run owns:
//
//	sqlite:        a SQLite file in a temporary directory, removed after
//	sqlite:PATH    a new SQLite file at PATH, kept (it must not exist)
//	postgres://…   PostgreSQL, through a chaos.Proxy; the run's tables go into a
//	               fresh schema, dropped after unless keep
func openVerifyDB(ctx context.Context, raw string, keep bool) (*verifyDB, error) {
	switch {
	case strings.HasPrefix(raw, "sqlite:"):
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
		return &verifyDB{name: name, db: s.DB(), store: s, clock: clock, close: func() { s.Close(); cleanup() }}, nil

	case strings.HasPrefix(raw, "postgres://"), strings.HasPrefix(raw, "postgresql://"):
		u, err := url.Parse(raw)
		if err != nil {
			// A *url.Error quotes the whole URL, password included.
			return nil, fmt.Errorf("--db %q: %s: use postgres://user@host:5432/db", redactURL(raw), redact.String(err.Error()))
		}
		admin, err := sql.Open("pgx", raw)
		if err != nil {
			return nil, fmt.Errorf("--db %s: %w", redactURL(raw), redact.Error(err))
		}
		schema := "idem_verify_" + randomHex(6)
		if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
			admin.Close()
			return nil, fmt.Errorf("--db %s: create the run's schema: %w", redactURL(raw), redact.Error(err))
		}
		drop := func() {
			if !keep {
				_, _ = admin.ExecContext(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			}
			admin.Close()
		}
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "5432")
		}
		proxy, err := chaos.NewProxy("postgres", host)
		if err != nil {
			drop()
			return nil, err
		}
		u.Host = proxy.Addr()
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		db, err := sql.Open("pgx", u.String())
		if err == nil {
			db.SetMaxOpenConns(32)
		}
		var s *idempg.SQLStore
		if err == nil {
			s, err = idempg.NewSQL(ctx, db, idempg.Config{})
		}
		if err != nil {
			if db != nil {
				db.Close()
			}
			proxy.Close()
			drop()
			return nil, fmt.Errorf("--db %s: %w", redactURL(raw), redact.Error(err))
		}
		name := "postgres (schema " + schema + ")"
		return &verifyDB{name: name, db: db, store: s, proxy: proxy,
			close: func() { db.Close(); proxy.Close(); drop() }}, nil
	}
	return nil, fmt.Errorf("--db %q: unknown database; use sqlite: (temporary), sqlite:PATH or postgres://user@host/db", redactURL(raw))
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
