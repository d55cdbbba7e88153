package idemmysql

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/cursor"
	"github.com/idemhq/idem/storekit"
)

var (
	_ idem.Inspector   = (*Store)(nil)
	_ idem.ScopeLister = (*Store)(nil)
)

const recordColumns = `state, fingerprint, token, result, created_us, expires_us`

func scanRecord(k idem.Key, r interface{ Scan(...any) error }, pre ...any) (idem.Record, error) {
	var (
		state                   int
		token, created, expires int64
		rec                     = idem.Record{Key: k}
	)
	err := r.Scan(append(pre, &state, &rec.Fingerprint, &token, &rec.Result, &created, &expires)...)
	rec.State, rec.Token = idem.State(state), uint64(token)
	rec.CreatedAt, rec.ExpiresAt = time.UnixMicro(created), time.UnixMicro(expires)
	if len(rec.Fingerprint) == 0 {
		rec.Fingerprint = nil
	}
	if rec.State == idem.StateCompleted && rec.Result == nil {
		rec.Result = []byte{}
	}
	return rec, err
}

// Inspect implements idem.Inspector. A released key keeps its row, in progress with
// a lease that ended at the epoch (see the release statement), until the sweeper
// deletes it; Inspect shows it so.
func (s *Store) Inspect(ctx context.Context, k idem.Key) (idem.Record, error) {
	if err := storekit.CheckEvict(ctx, k); err != nil {
		return idem.Record{}, err
	}
	rec, err := scanRecord(k, s.db.QueryRowContext(ctx,
		`SELECT `+recordColumns+` FROM `+quote(s.table)+` WHERE scope = ? AND id = ?`, k.Scope, k.ID))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return idem.Record{}, idem.ErrNotFound
	case err != nil:
		return idem.Record{}, backendErr(ctx, "inspect", err)
	}
	return rec, nil
}

// List implements idem.Inspector: one range of the primary key (scope, id) per page,
// ids in ascending byte order (the columns are VARBINARY); the cursor is the
// base64url of the page's last id.
func (s *Store) List(ctx context.Context, scope, after string, limit int) (idem.KeyPage, error) {
	if err := storekit.CheckList(ctx, scope, limit); err != nil {
		return idem.KeyPage{}, err
	}
	after, err := cursor.DecodeID(after)
	if err != nil {
		return idem.KeyPage{}, err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT id, `+recordColumns+` FROM `+quote(s.table)+
		` WHERE scope = ? AND id > ? ORDER BY id LIMIT ?`, scope, after, limit+1)
	if err != nil {
		return idem.KeyPage{}, backendErr(ctx, "list", err)
	}
	defer rows.Close()
	var page idem.KeyPage
	for rows.Next() {
		var id []byte
		rec, err := scanRecord(idem.Key{Scope: scope}, rows, &id)
		if err != nil {
			return idem.KeyPage{}, backendErr(ctx, "list", err)
		}
		rec.Key.ID = string(id)
		page.Records = append(page.Records, rec)
	}
	if err := rows.Err(); err != nil {
		return idem.KeyPage{}, backendErr(ctx, "list", err)
	}
	page.Records, page.Next = cursor.Trim(page.Records, limit, cursor.RecordID)
	return page, nil
}

// Evict implements idem.Inspector in a transaction of its own: it reads the row
// under its lock, so a concurrent Complete lands either before (the completed record
// is evicted) or after (no row: the holder gets ErrLeaseLost), and then deletes it.
// Tokens come from the sequence or the AUTO_INCREMENT table, never from the row, so
// the key's next claim gets a token above the evicted holder's.
func (s *Store) Evict(ctx context.Context, k idem.Key, force bool) (idem.Record, error) {
	if err := storekit.CheckEvict(ctx, k); err != nil {
		return idem.Record{}, err
	}
	var rec idem.Record
	err := idemsql.RetrySerializationFailures(ctx, func() error {
		return s.inTx(ctx, func(tx *sql.Tx) error {
			var err error
			rec, err = scanRecord(k, tx.QueryRowContext(ctx,
				`SELECT `+recordColumns+` FROM `+quote(s.table)+` WHERE scope = ? AND id = ? FOR UPDATE`, k.Scope, k.ID))
			switch {
			case errors.Is(err, sql.ErrNoRows):
				return idem.ErrNotFound
			case err != nil:
				return err
			case rec.State == idem.StateInProgress && !force:
				return storekit.ErrForceNeeded(k)
			}
			_, err = tx.ExecContext(ctx, `DELETE FROM `+quote(s.table)+` WHERE scope = ? AND id = ?`, k.Scope, k.ID)
			return err
		})
	})
	var ie *idem.InputError
	switch {
	case err == nil:
		return rec, nil
	case errors.Is(err, idem.ErrNotFound), errors.As(err, &ie):
		return idem.Record{}, err
	}
	return idem.Record{}, backendErr(ctx, "evict", err)
}

// scopesSQL is a Scopes page: DISTINCT on the primary key's first column, which
// InnoDB answers with a loose index scan ("Using index for group-by"): one seek of
// the key per scope, never a read of a scope's records (see
// TestScopesPlanUsesLooseIndexScan). Scopes are VARBINARY: ascending byte order.
//
// Parameters: the scope the page starts after, rows.
func (s *Store) scopesSQL() string {
	return `SELECT DISTINCT scope FROM ` + quote(s.table) + ` WHERE scope > ? ORDER BY scope LIMIT ?`
}

// Scopes implements idem.ScopeLister: a loose index scan of limit+1 scopes per page
// (see scopesSQL), in ascending byte order; the cursor is the base64url of the
// page's last scope.
func (s *Store) Scopes(ctx context.Context, after string, limit int) (idem.ScopePage, error) {
	if err := storekit.CheckScopes(ctx, limit); err != nil {
		return idem.ScopePage{}, err
	}
	after, err := cursor.DecodeScope(after)
	if err != nil {
		return idem.ScopePage{}, err
	}
	rows, err := s.db.QueryContext(ctx, s.scopesSQL(), after, limit+1)
	if err != nil {
		return idem.ScopePage{}, backendErr(ctx, "scopes", err)
	}
	defer rows.Close()
	var page idem.ScopePage
	for rows.Next() {
		var scope []byte
		if err := rows.Scan(&scope); err != nil {
			return idem.ScopePage{}, backendErr(ctx, "scopes", err)
		}
		page.Scopes = append(page.Scopes, string(scope))
	}
	if err := rows.Err(); err != nil {
		return idem.ScopePage{}, backendErr(ctx, "scopes", err)
	}
	page.Scopes, page.Next = cursor.Trim(page.Scopes, limit, cursor.Self)
	return page, nil
}
