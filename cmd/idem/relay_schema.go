package main

import (
	"fmt"
	"io"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/outbox"
)

// schemaText is the outbox's DDL for d.
func schemaText(d idem.Dialect) string {
	s, err := outbox.Schema(d)
	if err != nil {
		panic(err) // the embedded migrations are broken: a build error, caught by the tests
	}
	return s
}

// How a service in any language adds to the outbox table (outbox.Schema is the table).
const (
	insertContract = `-- In the transaction of the business write (the relay creates the table itself
-- when it starts; create it first if your service writes before that):
INSERT INTO idem_outbox (msg_id, topic, ordering_key, part, headers, payload, created_at, available_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $7);
--   msg_id        the message's idempotency key (1-255 bytes of UTF-8, no control
--                 characters); the same logical message always gets the same one.
--                 It becomes the broker's dedup id and the consumers' key.
--   topic         NATS subject, Kafka topic, Redis stream, AMQP routing key, or the
--                 webhook's Idem-Topic.
--   ordering_key  '' for none; messages with one key are published in order.
--   part          FNV-1a 32-bit hash of the UTF-8 bytes of ordering_key (of msg_id
--                 when ordering_key is ''), modulo 64.
--   headers       a JSON object of string values, '{}' for none.
--   payload       the body, at most 8 MiB.
--   created_at    the current Unix time in milliseconds, also as available_at.`

	notifyContract = `-- PostgreSQL: then, in the same transaction, wake the relays at commit:
SELECT pg_notify('idem_outbox', '');`
)

// printSchema writes the table and the insert contract for dialect ("postgres",
// "sqlite", or "" for both).
func printSchema(w io.Writer, dialect string) {
	if dialect != "sqlite" {
		fmt.Fprintf(w, "-- PostgreSQL\n%s\n\n", schemaText(idem.Postgres))
	}
	if dialect != "postgres" {
		fmt.Fprintf(w, "-- SQLite\n%s\n\n", schemaText(idem.SQLite))
	}
	fmt.Fprintln(w, insertContract)
	if dialect != "sqlite" {
		fmt.Fprintf(w, "\n%s\n", notifyContract)
	}
}
