package sqltest

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/idemhq/idem/idemsql"
)

// Rows written by hand, as another team's service (or a person at a SQL prompt)
// writes them: they follow the schema `idem migrate print` shows, but not what
// idem's own code puts in a column (headers that are not a JSON object of strings,
// results that are not a JSON object of base64 strings, and on SQLite, which keeps
// any value in any column, text where a number belongs). The schema of the
// component must be up to date on db.

// DeadLetter inserts a pending dead letter of consumer "billing" for message msgID,
// whose headers column holds headers and whose dead_at column holds deadAt, and
// returns its id.
func DeadLetter(t testing.TB, db idemsql.TxDB[*sql.Tx], msgID, headers string, deadAt any) int64 {
	t.Helper()
	exec(t, db, `INSERT INTO idem_dead_letters (consumer, msg_id, topic, position, headers, payload, kind, reason,
		attempts, first_at, dead_at) VALUES ('billing', $1, 'billing.v1', '', $2, $3, 'permanent', 'written by hand', 1, $4, $5)`,
		msgID, headers, []byte(`{"amount":1}`), time.Now().UnixMilli(), deadAt)
	return id(t, db, `SELECT id FROM idem_dead_letters WHERE msg_id = $1`, msgID)
}

// Parked inserts a message parked by the relay on topic "orders", whose headers
// column holds headers and whose attempts column holds attempts, and returns its id.
func Parked(t testing.TB, db idemsql.TxDB[*sql.Tx], msgID, headers string, attempts any) int64 {
	t.Helper()
	now := time.Now().UnixMilli()
	exec(t, db, `INSERT INTO idem_outbox (msg_id, topic, ordering_key, part, headers, payload, created_at, available_at,
		attempts, last_error, parked_at) VALUES ($1, 'orders', '', 0, $2, $3, $4, $4, $5, 'written by hand', $4)`,
		msgID, headers, []byte("payload"), now, attempts)
	return id(t, db, `SELECT id FROM idem_outbox WHERE msg_id = $1`, msgID)
}

// Saga inserts saga id (a saga named "order", at step 1, due at once) in state,
// whose results column holds results and whose attempts column holds attempts.
func Saga(t testing.TB, db idemsql.TxDB[*sql.Tx], id, state, results string, attempts any) {
	t.Helper()
	now := time.Now().UnixNano()
	exec(t, db, `INSERT INTO idem_sagas (id, saga, state, step, data, results, attempts, reason, next_at, lease_until,
		token, created_at, updated_at) VALUES ($1, 'order', $2, 1, $3, $4, $5, 'written by hand', $6, 0, 1, $6, $6)`,
		id, state, []byte("data"), results, attempts, now)
}

// Effect inserts the PENDING effect of key and step past its lease, at attempt 1,
// whose token column holds token.
func Effect(t testing.TB, db idemsql.TxDB[*sql.Tx], key, step string, token any) {
	t.Helper()
	keyCol := "key"
	if db.Dialect() == idemsql.MySQL {
		keyCol = "`key`"
	}
	exec(t, db, `INSERT INTO idem_effects (`+keyCol+`, step, state, token, lease_until, attempts, reason, created_at, updated_at)
		VALUES ($1, $2, 'pending', $3, 0, 1, 'written by hand', $4, $4)`, key, step, token, time.Now().UnixNano())
}

// Resolution inserts the resolution of saga id (resolved from previous), whose
// resolved_at column holds at.
func Resolution(t testing.TB, db idemsql.TxDB[*sql.Tx], id, previous string, at any) {
	t.Helper()
	exec(t, db, `INSERT INTO idem_saga_resolutions (id, previous_state, note, resolved_at) VALUES ($1, $2, 'written by hand', $3)`,
		id, previous, at)
}

func exec(t testing.TB, db idemsql.TxDB[*sql.Tx], query string, args ...any) {
	t.Helper()
	ctx := context.Background()
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		_, err := db.Querier(tx).Exec(ctx, query, args...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func id(t testing.TB, db idemsql.TxDB[*sql.Tx], query string, args ...any) (n int64) {
	t.Helper()
	ctx := context.Background()
	err := db.InTx(ctx, func(tx *sql.Tx) error { return db.Querier(tx).QueryRow(ctx, query, args...).Scan(&n) })
	if err != nil {
		t.Fatal(err)
	}
	return n
}
