package idemsqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/cursor"
	"github.com/idemhq/idem/storekit"
)

var _ idem.Inspector = (*Store)(nil)

const (
	inspectSQL = `SELECT state, fingerprint, token, result, created_ns, expires_ns
		FROM idem_records WHERE scope = ?1 AND id = ?2`
	// listSQL is a range of the primary-key b-tree (WITHOUT ROWID: the table itself),
	// in its BINARY collation: ids in ascending byte order.
	listSQL = `SELECT id, state, fingerprint, token, result, created_ns, expires_ns
		FROM idem_records WHERE scope = ?1 AND id > ?2 ORDER BY id LIMIT ?3`
	// evictSQL deletes the record in one statement, so a concurrent Complete lands
	// either before it (the completed record is evicted) or after it (no row: the
	// holder gets ErrLeaseLost). An in-progress record goes only with force (?3).
	evictSQL = `DELETE FROM idem_records WHERE scope = ?1 AND id = ?2 AND (state = 2 OR ?3)
		RETURNING state, fingerprint, token, result, created_ns, expires_ns`
)

func scanRecord(k idem.Key, r interface{ Scan(...any) error }, pre ...any) (idem.Record, error) {
	var (
		state, token, created, expires int64
		rec                            = idem.Record{Key: k}
	)
	err := r.Scan(append(pre, &state, &rec.Fingerprint, &token, &rec.Result, &created, &expires)...)
	rec.State, rec.Token = idem.State(state), uint64(token)
	rec.CreatedAt, rec.ExpiresAt = time.Unix(0, created), time.Unix(0, expires)
	if len(rec.Fingerprint) == 0 {
		rec.Fingerprint = nil
	}
	return rec, err
}

// Inspect implements idem.Inspector.
func (s *Store) Inspect(ctx context.Context, k idem.Key) (idem.Record, error) {
	if err := storekit.CheckEvict(ctx, k); err != nil {
		return idem.Record{}, err
	}
	rec, err := scanRecord(k, s.db.QueryRowContext(ctx, inspectSQL, k.Scope, k.ID))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return idem.Record{}, idem.ErrNotFound
	case err != nil:
		return idem.Record{}, backendErr(ctx, "inspect", err)
	}
	return rec, nil
}

// List implements idem.Inspector: one range of the primary key per page, ids in
// ascending byte order; the cursor is the base64url of the page's last id.
func (s *Store) List(ctx context.Context, scope, after string, limit int) (idem.KeyPage, error) {
	if err := storekit.CheckList(ctx, scope, limit); err != nil {
		return idem.KeyPage{}, err
	}
	after, err := cursor.DecodeID(after)
	if err != nil {
		return idem.KeyPage{}, err
	}
	rows, err := s.db.QueryContext(ctx, listSQL, scope, after, limit+1)
	if err != nil {
		return idem.KeyPage{}, backendErr(ctx, "list", err)
	}
	defer rows.Close()
	var page idem.KeyPage
	for rows.Next() {
		var id string
		rec, err := scanRecord(idem.Key{Scope: scope}, rows, &id)
		if err != nil {
			return idem.KeyPage{}, backendErr(ctx, "list", err)
		}
		rec.Key.ID = id
		page.Records = append(page.Records, rec)
	}
	if err := rows.Err(); err != nil {
		return idem.KeyPage{}, backendErr(ctx, "list", err)
	}
	page.Records, page.Next = cursor.Trim(page.Records, limit, cursor.RecordID)
	return page, nil
}

// Evict implements idem.Inspector. Tokens come from idem_meta's floor, which never
// falls, so the key's next claim gets a token above the evicted holder's.
func (s *Store) Evict(ctx context.Context, k idem.Key, force bool) (idem.Record, error) {
	if err := storekit.CheckEvict(ctx, k); err != nil {
		return idem.Record{}, err
	}
	for range 3 {
		rec, err := scanRecord(k, s.db.QueryRowContext(ctx, evictSQL, k.Scope, k.ID, force))
		if err == nil {
			return rec, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return idem.Record{}, backendErr(ctx, "evict", err)
		}
		// Nothing deleted: no record, or an in-progress one without force, unless
		// its holder completed it in between (then evict the completed record).
		var state int64
		switch err := s.db.QueryRowContext(ctx, `SELECT state FROM idem_records WHERE scope = ?1 AND id = ?2`,
			k.Scope, k.ID).Scan(&state); {
		case errors.Is(err, sql.ErrNoRows):
			return idem.Record{}, idem.ErrNotFound
		case err != nil:
			return idem.Record{}, backendErr(ctx, "evict", err)
		case state == stateInProgress && !force:
			return idem.Record{}, storekit.ErrForceNeeded(k)
		}
	}
	return idem.Record{}, backendErr(ctx, "evict", errors.New("the record kept changing under the eviction; try again"))
}

var _ idem.ScopeLister = (*Store)(nil)

// scopesSQL walks the primary key's distinct scopes by skipping: each step is one
// seek of the b-tree to the first scope above the last one (the scalar subquery),
// never a read of a scope's records, and the LIMIT ends the recursion. Scopes come
// in the BINARY collation: ascending byte order. See TestScopesPlanSeeksPrimaryKey.
//
// Parameters: ?1 the scope the page starts after, ?2 rows.
const scopesSQL = `WITH RECURSIVE s(scope) AS (
	SELECT (SELECT scope FROM idem_records WHERE scope > ?1 ORDER BY scope LIMIT 1)
	UNION ALL
	SELECT (SELECT scope FROM idem_records WHERE scope > s.scope ORDER BY scope LIMIT 1)
	FROM s WHERE s.scope IS NOT NULL
	LIMIT ?2
)
SELECT scope FROM s WHERE scope IS NOT NULL`

// Scopes implements idem.ScopeLister: limit+1 seeks of the primary key per page
// (see scopesSQL), scopes in ascending byte order; the cursor is the base64url of
// the page's last scope.
func (s *Store) Scopes(ctx context.Context, after string, limit int) (idem.ScopePage, error) {
	if err := storekit.CheckScopes(ctx, limit); err != nil {
		return idem.ScopePage{}, err
	}
	after, err := cursor.DecodeScope(after)
	if err != nil {
		return idem.ScopePage{}, err
	}
	rows, err := s.db.QueryContext(ctx, scopesSQL, after, limit+1)
	if err != nil {
		return idem.ScopePage{}, backendErr(ctx, "scopes", err)
	}
	defer rows.Close()
	var page idem.ScopePage
	for rows.Next() {
		var scope string
		if err := rows.Scan(&scope); err != nil {
			return idem.ScopePage{}, backendErr(ctx, "scopes", err)
		}
		page.Scopes = append(page.Scopes, scope)
	}
	if err := rows.Err(); err != nil {
		return idem.ScopePage{}, backendErr(ctx, "scopes", err)
	}
	page.Scopes, page.Next = cursor.Trim(page.Scopes, limit, cursor.Self)
	return page, nil
}
