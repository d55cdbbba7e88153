package main

import (
	"fmt"
	"io"
	"slices"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/outbox"
)

// schemaText is the outbox's DDL for d.
func schemaText(d idemsql.Dialect) string {
	s, err := outbox.Schema(d)
	if err != nil {
		panic(err) // the embedded migrations are broken: a build error, caught by the tests
	}
	return s
}

// insertContract is how a service in any language adds to the outbox table
// (outbox.Schema is the table), around the statement it runs (OutboxSQL.Insert).
const insertContract = `-- In the transaction of the business write (the relay creates the table itself
-- when it starts; create it first if your service writes before that):
%s;
--   msg_id        the message's idempotency key (1-255 bytes of UTF-8, no control
--                 characters); the same logical message always gets the same one.
--                 It becomes the broker's dedup id and the consumers' key.
--   topic         NATS subject, Kafka topic, Redis stream, AMQP routing key, or the
--                 webhook's Idem-Topic.
--   ordering_key  '' for none; messages with one key are published in order.
--   part          FNV-1a 32-bit hash of the UTF-8 bytes of ordering_key (of msg_id
--                 when ordering_key is ''), as an unsigned integer, modulo 64:
--                 0 to 63.
--   headers       a JSON object of string values, '{}' for none.
--   payload       the body, at most 8 MiB.
--   created_at    the current Unix time in milliseconds, also as available_at.
-- A row that breaks this contract is not published: each attempt fails with its
-- reason (the column and the fix), and after --max-attempts it is parked, listed
-- by idem outbox parked; the other rows are published meanwhile.
`

// schemaDialects are the dialects --schema prints, in order, by their --db name.
var schemaDialects = []struct {
	name, title string
	d           idemsql.Dialect
}{
	{"postgres", "PostgreSQL", idemsql.Postgres},
	{"mysql", "MySQL/MariaDB", idemsql.MySQL},
	{"sqlite", "SQLite", idemsql.SQLite},
}

// printSchema writes the table and the insert contract for dialect ("postgres",
// "mysql", "sqlite", or "" for all): the contract once, then what each database
// adds to it (OutboxSQL.WriterNote). MySQL's note rewrites the statement and
// PostgreSQL's adds one after it, so the notes come in the schemas' reverse order.
func printSchema(w io.Writer, dialect string) {
	var stmts []*idemsql.OutboxSQL
	for _, s := range schemaDialects {
		if dialect == "" || dialect == s.name {
			fmt.Fprintf(w, "-- %s\n%s\n\n", s.title, schemaText(s.d))
			stmts = append(stmts, outboxSQL(s.d))
		}
	}
	fmt.Fprintf(w, insertContract, stmts[0].Insert)
	for _, s := range slices.Backward(stmts) {
		if s.WriterNote != "" {
			fmt.Fprintf(w, "\n%s\n", s.WriterNote)
		}
	}
}

// outboxSQL is the outbox statements of d's driver.
func outboxSQL(d idemsql.Dialect) *idemsql.OutboxSQL {
	drv, err := idemsql.DriverFor(d)
	if err != nil {
		panic(err) // this command imports every driver: a build error, caught by the tests
	}
	return drv.Outbox()
}
