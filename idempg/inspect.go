package idempg

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/cursor"
	"github.com/idemhq/idem/storekit"
	"github.com/jackc/pgx/v5"
)

var (
	_ idem.Inspector   = (*Store)(nil)
	_ idem.Inspector   = (*SQLStore)(nil)
	_ idem.ScopeLister = (*Store)(nil)
	_ idem.ScopeLister = (*SQLStore)(nil)
)

// inspectorQueries are the statements of idem.Inspector.
type inspectorQueries struct {
	inspect, list, evict, state, scopes string
}

const recordColumns = `state, fingerprint, token, result, created_at, expires_at`

// listSQL is the keyset page: with scope fixed by equality, the primary key (scope,
// id) yields ids in order, so a page is one index range scan of limit+1 rows (see
// TestListPlanUsesPrimaryKey) in the column's collation.
//
// Parameters: $1 scope, $2 the id the page starts after, $3 rows.
const listSQL = `
SELECT id, ` + recordColumns + ` FROM {{table}}
WHERE scope = $1::text AND id > $2::text ORDER BY id LIMIT $3::int`

// evictSQL deletes the record in one statement. A concurrent completeSQL either
// committed first (the DELETE, having waited for its row lock, re-checks the new row
// version and evicts the completed record) or waits for the DELETE and then finds no
// row: ErrLeaseLost. An in-progress record goes only with force ($3).
//
// Parameters: $1 scope, $2 id, $3 force.
const evictSQL = `
DELETE FROM {{table}} WHERE scope = $1::text AND id = $2::text AND (state = 2 OR $3::bool)
RETURNING ` + recordColumns

func newInspectorQueries(n names) inspectorQueries {
	return inspectorQueries{
		inspect: n.fill(`SELECT ` + recordColumns + ` FROM {{table}} WHERE scope = $1::text AND id = $2::text`),
		list:    n.fill(listSQL),
		evict:   n.fill(evictSQL),
		state:   n.fill(`SELECT state FROM {{table}} WHERE scope = $1::text AND id = $2::text`),
		scopes:  n.fill(scopesSQL),
	}
}

// rows is what List reads from either driver.
type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// queryRows runs a query returning rows on the store's handle; done releases them.
func queryRows(ctx context.Context, cn conn, query string, args ...any) (r rows, done func(), err error) {
	switch c := cn.(type) {
	case pgxConn:
		q, ok := c.q.(interface {
			Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
		})
		if ok {
			pr, err := q.Query(ctx, query, args...)
			if err != nil {
				return nil, nil, err
			}
			return pr, pr.Close, nil
		}
	case sqlConn:
		q, ok := c.q.(interface {
			QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
		})
		if ok {
			sr, err := q.QueryContext(ctx, query, args...)
			if err != nil {
				return nil, nil, err
			}
			return sr, func() { _ = sr.Close() }, nil
		}
	}
	return nil, nil, fmt.Errorf("idempg: %T cannot run a query returning rows", cn)
}

func scanRecord(k idem.Key, r row, pre ...any) (idem.Record, error) {
	var (
		state int16
		token int64
		rec   = idem.Record{Key: k}
	)
	err := r.Scan(append(pre, &state, &rec.Fingerprint, &token, &rec.Result, &rec.CreatedAt, &rec.ExpiresAt)...)
	rec.State, rec.Token = idem.State(state), uint64(token)
	if len(rec.Fingerprint) == 0 {
		rec.Fingerprint = nil
	}
	if rec.State == idem.StateCompleted && rec.Result == nil {
		rec.Result = []byte{}
	}
	return rec, err
}

// Inspect implements idem.Inspector. It reads committed records: a claim inside an
// open ClaimTx transaction is not there yet.
func (s *core[Tx]) Inspect(ctx context.Context, k idem.Key) (idem.Record, error) {
	if err := storekit.CheckEvict(ctx, k); err != nil {
		return idem.Record{}, err
	}
	rec, err := scanRecord(k, s.db.queryRow(ctx, s.q.inspector.inspect, k.Scope, k.ID))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return idem.Record{}, idem.ErrNotFound
	case err != nil:
		return idem.Record{}, backendErr(ctx, "inspect", err)
	}
	return rec, nil
}

// List implements idem.Inspector: one range scan of the primary key per page (see
// listSQL), ids in ascending order of the id column's collation; the cursor is the
// base64url of the page's last id.
func (s *core[Tx]) List(ctx context.Context, scope, after string, limit int) (idem.KeyPage, error) {
	if err := storekit.CheckList(ctx, scope, limit); err != nil {
		return idem.KeyPage{}, err
	}
	after, err := cursor.DecodeID(after)
	if err != nil {
		return idem.KeyPage{}, err
	}
	rs, done, err := queryRows(ctx, s.db, s.q.inspector.list, scope, after, limit+1)
	if err != nil {
		return idem.KeyPage{}, backendErr(ctx, "list", err)
	}
	defer done()
	var page idem.KeyPage
	for rs.Next() {
		var id string
		rec, err := scanRecord(idem.Key{Scope: scope}, rs, &id)
		if err != nil {
			return idem.KeyPage{}, backendErr(ctx, "list", err)
		}
		rec.Key.ID = id
		page.Records = append(page.Records, rec)
	}
	if err := rs.Err(); err != nil {
		return idem.KeyPage{}, backendErr(ctx, "list", err)
	}
	page.Records, page.Next = cursor.Trim(page.Records, limit, cursor.RecordID)
	return page, nil
}

// Evict implements idem.Inspector (see evictSQL). Tokens come from the table's
// sequence, so the key's next claim gets a token above the evicted holder's.
func (s *core[Tx]) Evict(ctx context.Context, k idem.Key, force bool) (idem.Record, error) {
	if err := storekit.CheckEvict(ctx, k); err != nil {
		return idem.Record{}, err
	}
	for range maxAttempts {
		rec, err := scanRecord(k, s.db.queryRow(ctx, s.q.inspector.evict, k.Scope, k.ID, force))
		if err == nil {
			return rec, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return idem.Record{}, backendErr(ctx, "evict", err)
		}
		// Nothing deleted: no record, or an in-progress one without force, unless
		// its holder completed it in between (then evict the completed record).
		var state int16
		switch err := s.db.queryRow(ctx, s.q.inspector.state, k.Scope, k.ID).Scan(&state); {
		case errors.Is(err, sql.ErrNoRows):
			return idem.Record{}, idem.ErrNotFound
		case err != nil:
			return idem.Record{}, backendErr(ctx, "evict", err)
		case state == stateInProgress && !force:
			return idem.Record{}, storekit.ErrForceNeeded(k)
		}
	}
	return idem.Record{}, backendErr(ctx, "evict", errChurn)
}

// scopesSQL walks the primary key's distinct scopes by skipping (PostgreSQL has no
// skip scan of its own): each step of the recursion is one descent of the index to
// the first scope above the last one, never a read of a scope's records, and the
// outer LIMIT stops the recursion, which PostgreSQL evaluates lazily. Scopes come in
// the scope column's collation. See TestScopesPlanUsesPrimaryKey.
//
// Parameters: $1 the scope the page starts after, $2 rows.
const scopesSQL = `
WITH RECURSIVE walk(scope) AS (
	(SELECT r.scope FROM {{table}} r WHERE r.scope > $1::text ORDER BY r.scope LIMIT 1)
	UNION ALL
	SELECT (SELECT r.scope FROM {{table}} r WHERE r.scope > walk.scope ORDER BY r.scope LIMIT 1)
	FROM walk WHERE walk.scope IS NOT NULL
)
SELECT scope FROM walk WHERE scope IS NOT NULL LIMIT $2::int`

// Scopes implements idem.ScopeLister: limit+1 descents of the primary key per page
// (see scopesSQL), scopes in ascending order of the scope column's collation; the
// cursor is the base64url of the page's last scope.
func (s *core[Tx]) Scopes(ctx context.Context, after string, limit int) (idem.ScopePage, error) {
	if err := storekit.CheckScopes(ctx, limit); err != nil {
		return idem.ScopePage{}, err
	}
	after, err := cursor.DecodeScope(after)
	if err != nil {
		return idem.ScopePage{}, err
	}
	rs, done, err := queryRows(ctx, s.db, s.q.inspector.scopes, after, limit+1)
	if err != nil {
		return idem.ScopePage{}, backendErr(ctx, "scopes", err)
	}
	defer done()
	var page idem.ScopePage
	for rs.Next() {
		var scope string
		if err := rs.Scan(&scope); err != nil {
			return idem.ScopePage{}, backendErr(ctx, "scopes", err)
		}
		page.Scopes = append(page.Scopes, scope)
	}
	if err := rs.Err(); err != nil {
		return idem.ScopePage{}, backendErr(ctx, "scopes", err)
	}
	page.Scopes, page.Next = cursor.Trim(page.Scopes, limit, cursor.Self)
	return page, nil
}
