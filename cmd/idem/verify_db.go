package main

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
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

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
