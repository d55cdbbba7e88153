package idempg

import (
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
	claim, complete, release, sweep, records string
}

// names are the quoted identifiers derived from Config.Table.
type names struct {
	table, seq, index string
	// regclass is the table name as a regclass literal, for pg_class lookups.
	regclass string
}

func namesFor(table string) names {
	return names{
		table:    pgx.Identifier{table}.Sanitize(),
		seq:      pgx.Identifier{table + "_token_seq"}.Sanitize(),
		index:    pgx.Identifier{table + "_expires_at_idx"}.Sanitize(),
		regclass: pgx.Identifier{table}.Sanitize(),
	}
}

func (n names) fill(sql string) string {
	return strings.NewReplacer("{{table}}", n.table, "{{seq}}", n.seq, "{{index}}", n.index).Replace(sql)
}

func newQueries(n names) queries {
	return queries{
		claim:    n.fill(claimSQL),
		complete: n.fill(completeSQL),
		release:  n.fill(releaseSQL),
		sweep:    n.fill(sweepSQL),
		records:  recordsSQL,
	}
}

// claimSQL answers a claim in one statement. cur reads the live row (if any) with the
// statement's snapshot; only when there is none does ins insert a fresh row, or take
// over an expired one with a new token. A duplicate is therefore a plain index read:
// no row lock, no sequence value, no WAL.
//
// ins's ON CONFLICT sees rows that cur's snapshot cannot (committed after the
// statement began, or by a transaction it waited for). When such a row is live, the
// WHERE keeps it and the statement returns no row; the caller then runs it again,
// and the new snapshot of the second run sees the row. In REPEATABLE READ or
// SERIALIZABLE transactions Postgres raises a serialization failure instead.
//
// Parameters: $1 scope, $2 id, $3 fingerprint, $4 lease µs, $5 retention µs.
const claimSQL = `
WITH clk AS MATERIALIZED (SELECT clock_timestamp() AS now),
cur AS (
	SELECT r.state, r.fingerprint, r.token, r.result, r.created_at, r.expires_at
	FROM {{table}} r, clk
	WHERE r.scope = $1::text AND r.id = $2::text AND r.expires_at > clk.now
),
ins AS (
	INSERT INTO {{table}} AS r (scope, id, state, fingerprint, token, retention, created_at, expires_at)
	SELECT $1, $2, 1, COALESCE($3::bytea, ''::bytea), nextval('{{seq}}'),
		$5::bigint * interval '1 microsecond', clk.now, clk.now + $4::bigint * interval '1 microsecond'
	FROM clk
	WHERE NOT EXISTS (SELECT 1 FROM cur)
	ON CONFLICT (scope, id) DO UPDATE SET
		state = 1, fingerprint = excluded.fingerprint, token = excluded.token, result = NULL,
		retention = excluded.retention, created_at = excluded.created_at, expires_at = excluded.expires_at
	WHERE r.expires_at <= excluded.created_at
	RETURNING true AS acquired, r.state, r.fingerprint, r.token, r.result, r.created_at, r.expires_at
)
SELECT * FROM ins
UNION ALL
SELECT false, state, fingerprint, token, result, created_at, expires_at FROM cur`

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

// Answers of releaseSQL.
const (
	releaseDone      = 0 // deleted, or nothing live to release
	releaseCompleted = 1 // ErrCompleted
	releaseLost      = 2 // ErrLeaseLost
	releaseRetry     = 3 // the row changed under the statement: run it again
)

// releaseSQL deletes the holder's live in-progress row, or says why it did not. When
// the DELETE waited for a concurrent writer and then skipped the row, the snapshot
// still shows it in progress under our token: releaseRetry.
//
// Parameters: $1 scope, $2 id, $3 token.
const releaseSQL = `
WITH clk AS MATERIALIZED (SELECT clock_timestamp() AS now),
del AS (
	DELETE FROM {{table}} r USING clk
	WHERE r.scope = $1::text AND r.id = $2::text AND r.token = $3::bigint AND r.state = 1 AND r.expires_at > clk.now
	RETURNING 1
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM del) THEN 0 ELSE COALESCE((
	SELECT CASE WHEN r.token <> $3 THEN 2 WHEN r.state = 2 THEN 1 ELSE 3 END
	FROM {{table}} r, clk
	WHERE r.scope = $1 AND r.id = $2 AND r.expires_at > clk.now), 0) END`

// sweepSQL deletes up to $1 expired rows. The clock is read in an InitPlan so the
// expires_at index can serve the range (a volatile call in the WHERE could not); SKIP
// LOCKED leaves rows alone that a transaction is taking over right now.
const sweepSQL = `
DELETE FROM {{table}}
WHERE ctid = ANY (ARRAY(
	SELECT ctid FROM {{table}}
	WHERE expires_at <= (SELECT clock_timestamp())
	LIMIT $1::int
	FOR UPDATE SKIP LOCKED))`

// recordsSQL is the planner's row estimate: free to read at every scrape, unlike
// count(*), and as fresh as the last (auto)vacuum or analyze.
const recordsSQL = `SELECT GREATEST(reltuples, 0)::float8 FROM pg_class WHERE oid = to_regclass($1::text)`
