package drivertest

import (
	"database/sql"
	"errors"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
)

// testEvict runs Evict and State, or Lock and Delete where the family says
// EvictLocked, on dt-a's live records.
func (r *recordsBench[Tx]) testEvict(t *testing.T) {
	done, busy := seeds[0], seeds[1] // dt-a/k1 completed, dt-a/k2 in progress
	if r.q.EvictLocked {
		r.evictLocked(t, busy)
		r.evictLocked(t, done)
		return
	}
	if _, deleted := r.evict(t, busy.key, false); deleted {
		t.Fatalf("RecordsSQL.Evict without force ($3 false) deleted the in-progress %v", busy.key)
	}
	if st, found := r.state(t, busy.key); !found || st != int64(idem.StateInProgress) {
		t.Fatalf("RecordsSQL.State of the in-progress %v: state %d, found %v; want 1", busy.key, st, found)
	}
	for _, c := range []struct {
		s     seeded
		force bool
	}{{busy, true}, {done, false}} {
		rec, deleted := r.evict(t, c.s.key, c.force)
		if !deleted {
			t.Fatalf("RecordsSQL.Evict of %v (state %d, force %v) deleted nothing", c.s.key, c.s.state, c.force)
		}
		r.checkRecord(t, "Evict", rec, c.s)
		r.checkGone(t, "Evict", c.s.key)
		if _, found := r.state(t, c.s.key); found {
			t.Errorf("RecordsSQL.State returned a row for the evicted %v", c.s.key)
		}
	}
	if _, deleted := r.evict(t, idem.Key{Scope: "dt-a", ID: "absent"}, true); deleted {
		t.Errorf("RecordsSQL.Evict returned a row for a key with no record")
	}
}

func (r *recordsBench[Tx]) evict(t *testing.T, k idem.Key, force bool) (rec idem.Record, deleted bool) {
	t.Helper()
	ctx := ctxFor(t)
	err := r.db.Auto(ctx, func(q idemsql.Querier) (err error) {
		rec, err = r.q.ScanRecord(q.QueryRow(ctx, r.q.Evict, k.Scope, k.ID, force), k)
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return idem.Record{}, false
	}
	if err != nil {
		t.Fatalf("RecordsSQL.Evict of %v (force %v): %v", k, force, err)
	}
	return rec, true
}

func (r *recordsBench[Tx]) state(t *testing.T, k idem.Key) (state int64, found bool) {
	t.Helper()
	ctx := ctxFor(t)
	err := r.db.Auto(ctx, func(q idemsql.Querier) error { return q.QueryRow(ctx, r.q.State, k.Scope, k.ID).Scan(&state) })
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false
	}
	if err != nil {
		t.Fatalf("RecordsSQL.State of %v: %v", k, err)
	}
	return state, true
}

// evictLocked reads s's record with Lock and deletes it with Delete in one
// transaction.
func (r *recordsBench[Tx]) evictLocked(t *testing.T, s seeded) {
	t.Helper()
	ctx := ctxFor(t)
	var rec idem.Record
	var n int64
	err := r.db.InTx(ctx, func(tx Tx) (err error) {
		q := r.db.Querier(tx)
		if rec, err = r.q.ScanRecord(q.QueryRow(ctx, r.q.Lock, s.key.Scope, s.key.ID), s.key); err != nil {
			return err
		}
		n, err = q.Exec(ctx, r.q.Delete, s.key.Scope, s.key.ID)
		return err
	})
	if err != nil {
		t.Fatalf("RecordsSQL.Lock then Delete of %v: %v", s.key, err)
	}
	r.checkRecord(t, "Lock", rec, s)
	if n != 1 {
		t.Errorf("RecordsSQL.Delete of %v affected %d rows, want 1", s.key, n)
	}
	r.checkGone(t, "Delete", s.key)
}

func (r *recordsBench[Tx]) checkGone(t *testing.T, field string, k idem.Key) {
	t.Helper()
	if _, found := r.inspect(t, k); found {
		t.Errorf("RecordsSQL.%s left %v in the table", field, k)
	}
}

// testSweep runs Sweep one row at a time: it must delete dt-a/k3 and dt-c/k1, which
// expired an hour ago, and leave dt-b/k1, which has an hour to go.
func (r *recordsBench[Tx]) testSweep(t *testing.T) {
	if r.q.Sweep == "" {
		t.Skip("RecordsSQL.Sweep is empty: the driver's store sweeps on its own")
	}
	ctx := ctxFor(t)
	var swept []int64
	for range 3 {
		var n int64
		err := r.db.Auto(ctx, func(q idemsql.Querier) (err error) {
			n, err = q.Exec(ctx, r.q.Sweep, 1)
			return err
		})
		if err != nil {
			t.Fatalf("RecordsSQL.Sweep: %v", err)
		}
		swept = append(swept, n)
	}
	if swept[0] != 1 || swept[1] != 1 || swept[2] != 0 {
		t.Errorf("RecordsSQL.Sweep with $1 = 1, three times, deleted %v rows, want [1 1 0] (at most $1 rows a statement, only expired ones)", swept)
	}
	for _, s := range []seeded{seeds[2], seeds[4]} {
		r.checkGone(t, "Sweep", s.key)
	}
	if _, found := r.inspect(t, seeds[3].key); !found {
		t.Errorf("RecordsSQL.Sweep deleted %v, whose lease has an hour to go", seeds[3].key)
	}
}
