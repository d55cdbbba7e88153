package idemsqlite

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/storekit"
)

// The statements below run inside a write transaction, so a read followed by a write
// is atomic: no other writer can change the row in between. They are prepared once
// (parsing costs more than running them) and used through a runner.
type stmtID uint8

const (
	selectRecord stmtID = iota
	selectFence
	upsertRecord
	completeRecord
	releaseRecord
	renewRecord
	sweepRecords
	raiseMeta
	selectMeta
	storeMeta
	numStmts
)

var stmtSQL = [numStmts]string{
	selectRecord: `SELECT state, fingerprint, token, result, created_ns, expires_ns
		FROM idem_records WHERE scope = ?1 AND id = ?2`,
	selectFence: `SELECT state, token, expires_ns FROM idem_records WHERE scope = ?1 AND id = ?2`,
	// A claim of an absent or expired key replaces whatever row is there.
	upsertRecord: `INSERT INTO idem_records
		(scope, id, state, fingerprint, token, result, retention_ns, created_ns, expires_ns)
		VALUES (?1, ?2, 1, ?3, ?4, NULL, ?5, ?6, ?7)
		ON CONFLICT (scope, id) DO UPDATE SET state = 1, fingerprint = excluded.fingerprint,
			token = excluded.token, result = NULL, retention_ns = excluded.retention_ns,
			created_ns = excluded.created_ns, expires_ns = excluded.expires_ns`,
	// Only the live in-progress holder completes; MIN keeps now+retention from
	// overflowing into a REAL.
	completeRecord: `UPDATE idem_records SET state = 2, result = ?5,
			expires_ns = ?4 + MIN(retention_ns, 9223372036854775807 - ?4)
		WHERE scope = ?1 AND id = ?2 AND token = ?3 AND state = 1 AND expires_ns > ?4`,
	releaseRecord: `DELETE FROM idem_records
		WHERE scope = ?1 AND id = ?2 AND token = ?3 AND state = 1 AND expires_ns > ?4`,
	renewRecord: `UPDATE idem_records SET expires_ns = ?5
		WHERE scope = ?1 AND id = ?2 AND token = ?3 AND state = 1 AND expires_ns > ?4`,
	sweepRecords: `DELETE FROM idem_records WHERE (scope, id) IN
		(SELECT scope, id FROM idem_records WHERE expires_ns <= ?1 LIMIT ?2)`,
	// The durable token floor. A caller's transaction raises it per token, in one
	// statement thanks to RETURNING; the writer reads it once per group and stores it
	// once before COMMIT.
	raiseMeta:  `UPDATE idem_meta SET last_token = MAX(last_token + 1, ?1) WHERE id = 1 RETURNING last_token`,
	selectMeta: `SELECT last_token FROM idem_meta WHERE id = 1`,
	storeMeta:  `UPDATE idem_meta SET last_token = ?1 WHERE id = 1 AND last_token < ?1`,
}

// stmts are the statements prepared on a *sql.DB (for callers' transactions) or on
// the writer's *sql.Conn.
type stmts [numStmts]*sql.Stmt

func prepare(ctx context.Context, p interface {
	PrepareContext(context.Context, string) (*sql.Stmt, error)
}) (*stmts, error) {
	var st stmts
	for id, text := range stmtSQL {
		var err error
		if st[id], err = p.PrepareContext(ctx, text); err != nil {
			st.close()
			return nil, err
		}
	}
	return &st, nil
}

func (st *stmts) close() error {
	var errs []error
	for _, s := range st {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	return errors.Join(errs...)
}

const (
	stateInProgress = int64(idem.StateInProgress)
	stateCompleted  = int64(idem.StateCompleted)
)

// claimRecord applies one claim at time now (unix ns).
func (s *Store) claimRecord(ctx context.Context, q runner, c idem.Claim, now int64) (idem.Result, error) {
	var (
		state, token, created, expires int64
		fp, result                     []byte
	)
	err := q.queryRow(ctx, selectRecord, c.Key.Scope, c.Key.ID).
		Scan(&state, &fp, &token, &result, &created, &expires)
	switch {
	case err == nil && now < expires:
		return duplicate(c, state, fp, token, result, created, expires), nil
	case err != nil && !errors.Is(err, sql.ErrNoRows):
		return idem.Result{}, err
	}
	tok, err := q.token(ctx, now)
	if err != nil {
		return idem.Result{}, err
	}
	if _, err := q.exec(ctx, upsertRecord, c.Key.Scope, c.Key.ID, c.Fingerprint, int64(tok),
		int64(c.Retention), now, addSat(now, c.Lease)); err != nil {
		return idem.Result{}, err
	}
	return idem.Result{Outcome: idem.Acquired, Token: tok}, nil
}

func duplicate(c idem.Claim, state int64, fp []byte, token int64, result []byte, created, expires int64) idem.Result {
	return storekit.Existing(c, idem.Record{
		State:       idem.State(state),
		Fingerprint: fp,
		Token:       uint64(token),
		Result:      result,
		CreatedAt:   time.Unix(0, created),
		ExpiresAt:   time.Unix(0, expires),
	})
}

// completeRecordIn returns nil, idem.ErrLeaseLost, or a database error.
func completeRecordIn(ctx context.Context, q runner, k idem.Key, token uint64, result []byte, now int64) error {
	if result == nil {
		result = []byte{} // a completed record's result is never NULL
	}
	f, changed, err := changeOrFence(ctx, q, completeRecord, k, k.Scope, k.ID, int64(token), now, result)
	switch {
	case err != nil || changed:
		return err
	case f.completedBy(token, now):
		return nil // completed twice: the first result stays
	}
	return idem.ErrLeaseLost
}

// releaseRecordIn returns nil, idem.ErrLeaseLost, idem.ErrCompleted, or a database
// error.
func releaseRecordIn(ctx context.Context, q runner, k idem.Key, token uint64, now int64) error {
	f, changed, err := changeOrFence(ctx, q, releaseRecord, k, k.Scope, k.ID, int64(token), now)
	switch {
	case err != nil || changed:
		return err
	case !f.found || now >= f.expires:
		return nil // absent or expired: nothing to give back
	case f.token != int64(token):
		return idem.ErrLeaseLost
	case f.state == stateCompleted:
		return idem.ErrCompleted
	}
	return nil
}

// renewRecordIn returns nil, idem.ErrLeaseLost, idem.ErrCompleted, or a database
// error.
func renewRecordIn(ctx context.Context, q runner, k idem.Key, token uint64, lease time.Duration, now int64) error {
	f, changed, err := changeOrFence(ctx, q, renewRecord, k, k.Scope, k.ID, int64(token), now, addSat(now, lease))
	switch {
	case err != nil || changed:
		return err
	case f.completedBy(token, now):
		return idem.ErrCompleted
	}
	return idem.ErrLeaseLost
}

// fenceRow is a key's row as selectFence reads it, to say why a statement on the
// holder's live row changed nothing.
type fenceRow struct {
	state, token, expires int64
	found                 bool
}

// completedBy reports a live row that token completed.
func (f fenceRow) completedBy(token uint64, now int64) bool {
	return f.found && f.token == int64(token) && f.state == stateCompleted && now < f.expires
}

// changeOrFence runs statement id with args (scope and id first) on k's row and,
// when it changed no row, reads the row's fence.
func changeOrFence(ctx context.Context, q runner, id stmtID, k idem.Key, args ...any) (f fenceRow, changed bool, err error) {
	n, err := affected(q.exec(ctx, id, args...))
	if err != nil || n == 1 {
		return fenceRow{}, err == nil, err
	}
	err = q.queryRow(ctx, selectFence, k.Scope, k.ID).Scan(&f.state, &f.token, &f.expires)
	if errors.Is(err, sql.ErrNoRows) {
		return fenceRow{}, false, nil
	}
	f.found = err == nil
	return f, false, err
}

func sweepRecordsIn(ctx context.Context, q runner, now int64, limit int) (int, error) {
	n, err := affected(q.exec(ctx, sweepRecords, now, limit))
	return int(n), err
}

func affected(r sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// addSat adds d to now, saturating instead of wrapping for absurd durations.
func addSat(now int64, d time.Duration) int64 {
	if int64(d) > math.MaxInt64-now {
		return math.MaxInt64
	}
	return now + int64(d)
}
