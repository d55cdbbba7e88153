package open

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/internal/redact"
)

// Database is the database of a verify run and the idem TxStore on it.
type Database struct {
	Name  string // for reports: "sqlite (temporary file)", "postgres"
	DB    *sql.DB
	Store idem.TxStore[*sql.Tx]
	Clock *chaos.Clock // drives the store's expiry; nil where the database's clock does
	Proxy *chaos.Proxy // the database connections go through it; nil for SQLite
	Close func()
}

// proxiedVerifyDB is the Database of a run's own schema or database on a server,
// reached through proxy (nil: directly): drop removes the schema (unless kept) and closes the
// server's admin connection. If err is set (opening db or the store failed), it
// closes what was opened and returns err as --db desc's.
func proxiedVerifyDB(name, desc string, db *sql.DB, store idem.TxStore[*sql.Tx], proxy *chaos.Proxy, drop func(), err error) (*Database, error) {
	if err != nil {
		if db != nil {
			db.Close()
		}
		closeProxy(proxy)
		drop()
		return nil, fmt.Errorf("--db %s: %w", desc, redact.Error(err))
	}
	return &Database{Name: name, DB: db, Store: store, Proxy: proxy,
		Close: func() { db.Close(); closeProxy(proxy); drop() }}, nil
}

// closeProxy closes p, if the database is reached through one.
func closeProxy(p *chaos.Proxy) {
	if p != nil {
		p.Close()
	}
}

// RandomHex is n random bytes in hex: the name of a run's own schema, database,
// stream or key space.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
