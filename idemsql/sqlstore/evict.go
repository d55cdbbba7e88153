package sqlstore

import (
	"context"
	"database/sql"
	"errors"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/storekit"
)

// maxEvictAttempts bounds Evict's rounds when the record changes under it (an
// in-progress record its holder completes between the DELETE and the read of its
// state).
const maxEvictAttempts = 8

var errEvictChurn = errors.New("the record kept changing under the eviction; try again")

// Evict implements idem.Inspector in one statement (RecordsSQL.Evict), or where the
// database needs it in a transaction that locks the row (RecordsSQL.EvictLocked).
// The key's next claim gets a token above the evicted holder's: no driver draws a
// token from the row.
func (r *Records) Evict(ctx context.Context, k idem.Key, force bool) (idem.Record, error) {
	if err := storekit.CheckEvict(ctx, k); err != nil {
		return idem.Record{}, err
	}
	if r.q.EvictLocked {
		return r.evictLocked(ctx, k, force)
	}
	for range maxEvictAttempts {
		var rec idem.Record
		err := r.auto(ctx, func(q idemsql.Querier) (err error) {
			rec, err = r.q.ScanRecord(q.QueryRow(ctx, r.q.Evict, k.Scope, k.ID, force), k)
			return err
		})
		if err == nil {
			return rec, nil
		}
		if !isNoRows(err) {
			return idem.Record{}, r.backendErr(ctx, "evict", err)
		}
		// Nothing deleted: no record, or an in-progress one without force, unless
		// its holder completed it in between (then evict the completed record).
		var state int64
		err = r.auto(ctx, func(q idemsql.Querier) error { return q.QueryRow(ctx, r.q.State, k.Scope, k.ID).Scan(&state) })
		switch {
		case isNoRows(err):
			return idem.Record{}, idem.ErrNotFound
		case err != nil:
			return idem.Record{}, r.backendErr(ctx, "evict", err)
		case idem.State(state) == idem.StateInProgress && !force:
			return idem.Record{}, storekit.ErrForceNeeded(k)
		}
	}
	return idem.Record{}, r.backendErr(ctx, "evict", errEvictChurn)
}

// evictLocked reads the record under its lock (RecordsSQL.Lock), so a concurrent
// Complete lands either before (the completed record is evicted) or after (no row:
// the holder gets ErrLeaseLost), then deletes it, in a transaction run again when
// the database broke a deadlock with it.
func (r *Records) evictLocked(ctx context.Context, k idem.Key, force bool) (rec idem.Record, err error) {
	err = idemsql.RetrySerializationFailures(ctx, func() error {
		return r.inTx(ctx, func(q idemsql.Querier) error {
			rec, err = r.q.ScanRecord(q.QueryRow(ctx, r.q.Lock, k.Scope, k.ID), k)
			switch {
			case isNoRows(err):
				return idem.ErrNotFound
			case err != nil:
				return err
			case rec.State == idem.StateInProgress && !force:
				return storekit.ErrForceNeeded(k)
			}
			_, err = q.Exec(ctx, r.q.Delete, k.Scope, k.ID)
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
	return idem.Record{}, r.backendErr(ctx, "evict", err)
}

// isNoRows reports a statement that returned no row: sql.ErrNoRows, which
// pgx.ErrNoRows matches too.
func isNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }
