package idempg

import (
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Record states as stored in the state column.
const (
	stateInProgress = 1
	stateCompleted  = 2
)

// queries holds the statements of one store, with its table's names filled in once at
// construction so every call reuses the same text (and pgx's prepared statement).
type queries struct {
	insert, read, takeover, complete, release, renew string
	recordInsert, recordOne, recordTakeover          string
}

// names are the quoted identifiers derived from Config.Table.
type names struct {
	table, seq, index, claim string
}

func namesFor(table string) names {
	return names{
		table: pgx.Identifier{table}.Sanitize(),
		seq:   pgx.Identifier{table + "_token_seq"}.Sanitize(),
		index: pgx.Identifier{table + "_expires_at_idx"}.Sanitize(),
		claim: pgx.Identifier{table + "_claim"}.Sanitize(),
	}
}

func (n names) fill(sql string) string {
	return strings.NewReplacer("{{table}}", n.table, "{{seq}}", n.seq, "{{index}}", n.index, "{{claim}}", n.claim).Replace(sql)
}

func newQueries(n names) queries {
	return queries{
		insert:   n.fill(insertSQL),
		read:     n.fill(readSQL),
		takeover: n.fill(takeoverSQL),
		complete: n.fill(completeSQL),
		release:  n.fill(releaseSQL),
		renew:    n.fill(renewSQL),

		recordInsert:   n.fill(recordInsertSQL),
		recordOne:      n.fill(recordOneSQL),
		recordTakeover: n.fill(recordTakeoverSQL),
	}
}

// insertSQL claims a fresh key: the whole of a claim on the hot path. It calls the
// function of migration 002, which inserts the row and only then draws its token, so
// that the token is above every token an earlier incarnation of the key had (see the
// migration for the interleaving that an INSERT drawing nextval in its VALUES gets
// wrong). No row means the key exists: the caller reads it.
//
// ON CONFLICT DO NOTHING leaves an existing row alone: no row lock, no write, so a
// duplicate can never block the holder's Complete. The two clock_timestamp() calls
// make expires_at at least created_at + lease.
//
// Parameters: $1 scope, $2 id, $3 fingerprint, $4 lease µs, $5 retention µs.
const insertSQL = `
SELECT t FROM {{claim}}($1::text, $2::text, $3::bytea, $4::bigint, $5::bigint) AS t WHERE t IS NOT NULL`

// readSQL reads the row that made insertSQL do nothing, and says whether its lease or
// retention has passed (then the caller runs takeoverSQL). No row means it was
// released or swept in between: the caller inserts again. In REPEATABLE READ or
// SERIALIZABLE transactions, a row committed after the transaction's snapshot makes
// insertSQL raise a serialization failure instead.
//
// Parameters: $1 scope, $2 id.
const readSQL = `
SELECT state, fingerprint, token, result, created_at, expires_at, expires_at <= clock_timestamp()
FROM {{table}} WHERE scope = $1::text AND id = $2::text`

// takeoverSQL gives an expired row to a new holder with a new token. The WHERE is
// re-checked on the newest row version after any lock wait, so of two claimants
// racing for one expired row exactly one updates it; the other gets no row, reads
// again and sees the new holder's live lease.
//
// Parameters: as insertSQL.
const takeoverSQL = `
UPDATE {{table}} AS r SET
	state = 1, fingerprint = COALESCE($3::bytea, ''::bytea), token = nextval('{{seq}}'), result = NULL,
	retention = $5::bigint * interval '1 microsecond', created_at = clk.now,
	expires_at = clk.now + $4::bigint * interval '1 microsecond'
FROM (SELECT clock_timestamp() AS now) clk
WHERE r.scope = $1::text AND r.id = $2::text AND r.expires_at <= clk.now
RETURNING r.token`

// completeSQL completes the holder's live row. A row the same token already completed
// is rewritten unchanged, so a repeated Complete succeeds and keeps the first result;
// doing it in the UPDATE rather than a second read makes it correct under races too.
// No row updated means the token does not hold the key: ErrLeaseLost.
//
// Parameters: $1 scope, $2 id, $3 token, $4 result.
const completeSQL = `
UPDATE {{table}} AS r SET
	state = 2,
	result = CASE WHEN r.state = 1 THEN COALESCE($4::bytea, ''::bytea) ELSE r.result END,
	expires_at = CASE WHEN r.state = 1 THEN clock_timestamp() + r.retention ELSE r.expires_at END
WHERE r.scope = $1::text AND r.id = $2::text AND r.token = $3::bigint AND r.expires_at > clock_timestamp()`

// Answers of releaseSQL and renewSQL.
const (
	answerDone      = 0 // released, renewed, or (release) nothing live to release
	answerCompleted = 1 // ErrCompleted
	answerLost      = 2 // ErrLeaseLost
	answerRetry     = 3 // the row changed under the statement: run it again
)

// releaseSQL deletes the holder's live in-progress row, or says why it did not. When
// the DELETE waited for a concurrent writer and then skipped the row, the snapshot
// still shows it in progress under our token: answerRetry.
//
// Parameters: $1 scope, $2 id, $3 token.
var releaseSQL = answerSQL(`DELETE FROM {{table}} r USING clk`, answerDone)

// renewSQL moves the end of the holder's live in-progress lease to $4 µs from now,
// or says why it did not, like releaseSQL. A key with no live row was released,
// swept or expired: the lease is lost.
//
// Parameters: $1 scope, $2 id, $3 token, $4 lease µs.
var renewSQL = answerSQL(`UPDATE {{table}} r SET expires_at = clk.now + $4::bigint * interval '1 microsecond' FROM clk`, answerLost)

// answerSQL is releaseSQL or renewSQL: change (a DELETE or UPDATE of r, with the
// clock clk in scope) applied to the holder's live in-progress row, then the answer:
// answerDone when it changed the row, else why not, from the live row (ifGone when
// there is none).
func answerSQL(change string, ifGone int) string {
	return `
WITH clk AS MATERIALIZED (SELECT clock_timestamp() AS now),
chg AS (
	` + change + `
	WHERE r.scope = $1::text AND r.id = $2::text AND r.token = $3::bigint AND r.state = 1 AND r.expires_at > clk.now
	RETURNING 1
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM chg) THEN 0 ELSE COALESCE((
	SELECT CASE WHEN r.token <> $3 THEN 2 WHEN r.state = 2 THEN 1 ELSE 3 END
	FROM {{table}} r, clk
	WHERE r.scope = $1 AND r.id = $2 AND r.expires_at > clk.now), ` + strconv.Itoa(ifGone) + `) END`
}
