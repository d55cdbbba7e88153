package main

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/internal/redact"
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

// proxiedVerifyDB is the verifyDB of a run's own schema or database on a server,
// reached through proxy: drop removes the schema (unless kept) and closes the
// server's admin connection. If err is set (opening db or the store failed), it
// closes what was opened and returns err as --db desc's.
func proxiedVerifyDB(name, desc string, db *sql.DB, store idem.TxStore[*sql.Tx], proxy *chaos.Proxy, drop func(), err error) (*verifyDB, error) {
	if err != nil {
		if db != nil {
			db.Close()
		}
		proxy.Close()
		drop()
		return nil, fmt.Errorf("--db %s: %w", desc, redact.Error(err))
	}
	return &verifyDB{name: name, db: db, store: store, proxy: proxy,
		close: func() { db.Close(); proxy.Close(); drop() }}, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
