package drivertest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/migrate"
)

// Records checks the records family (idemsql.RecordsSQL) on the database of db,
// migrated by package migrate: it seeds the table with InsertFull, then runs every
// other statement and checks what it returns and what it leaves behind. It runs
// over any transaction type, so a driver with a native client (idempg's pgx) can
// run it there too.
func Records[Tx any](t *testing.T, db func(t *testing.T) idemsql.TxDB[Tx]) {
	r := newRecordsBench(t, db(t))
	r.seed(t)
	t.Run("Inspect", r.testInspect)
	t.Run("List", r.testList)
	t.Run("Scopes", r.testScopes)
	t.Run("Count", r.testCount)
	t.Run("Applied", r.testApplied)
	t.Run("Evict", r.testEvict)
	t.Run("Sweep", r.testSweep)
}

// recordsBench is one migrated records table and the family's statements for it.
type recordsBench[Tx any] struct {
	db  idemsql.TxDB[Tx]
	q   idemsql.RecordsSQL
	now time.Time
}

func newRecordsBench[Tx any](t *testing.T, db idemsql.TxDB[Tx]) *recordsBench[Tx] {
	t.Helper()
	if db.Driver == nil {
		t.Fatal("TxDB.Driver is nil: build the TxDB with the driver's constructor")
	}
	table := migrate.DefaultRecordsTable
	if err := migrate.Up(ctxFor(t), db, migrate.Records(table)); err != nil {
		t.Fatalf("migrate the records table: %v", err)
	}
	return &recordsBench[Tx]{db: db, q: db.Driver.Records().ForTable(table), now: time.Now().Truncate(time.Microsecond)}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A seeded record: the record as InsertFull writes it.
type seeded struct {
	key         idem.Key
	state       idem.State
	fingerprint []byte
	token       int64
	result      []byte // nil: NULL
	created     time.Duration
	expires     time.Duration // after the bench's now; negative: expired
}

// The seeded records: in scope dt-a a live completed record, a live one in
// progress and an expired completed one; one live record in dt-b and an expired one
// in dt-c.
var seeds = []seeded{
	{idem.Key{Scope: "dt-a", ID: "k1"}, idem.StateCompleted, []byte("fp1"), 11, []byte("r1"), -time.Minute, time.Hour},
	{idem.Key{Scope: "dt-a", ID: "k2"}, idem.StateInProgress, nil, 12, nil, 0, time.Hour},
	{idem.Key{Scope: "dt-a", ID: "k3"}, idem.StateCompleted, nil, 13, []byte{}, -2 * time.Hour, -time.Hour},
	{idem.Key{Scope: "dt-b", ID: "k1"}, idem.StateInProgress, []byte("fp4"), 14, nil, 0, time.Hour},
	{idem.Key{Scope: "dt-c", ID: "k1"}, idem.StateCompleted, nil, 15, []byte("r5"), -2 * time.Hour, -time.Hour},
}

func (r *recordsBench[Tx]) seed(t *testing.T) {
	ctx := ctxFor(t)
	for _, s := range seeds {
		var result any // NULL
		if s.result != nil {
			result = s.result
		}
		fp := s.fingerprint
		if fp == nil {
			fp = []byte{}
		}
		err := r.db.Auto(ctx, func(q idemsql.Querier) error {
			_, err := q.Exec(ctx, r.q.InsertFull, s.key.Scope, s.key.ID, int(s.state), fp, s.token, result,
				time.Hour.Microseconds(), r.now.Add(s.created).UnixMicro(), r.now.Add(s.expires).UnixMicro())
			return err
		})
		if err != nil {
			t.Fatalf("RecordsSQL.InsertFull of %v: %v", s.key, err)
		}
	}
}

// want is the record a statement should return for s.
func (r *recordsBench[Tx]) want(s seeded) idem.Record {
	rec := idem.Record{Key: s.key, State: s.state, Fingerprint: s.fingerprint, Token: uint64(s.token), Result: s.result,
		CreatedAt: r.now.Add(s.created), ExpiresAt: r.now.Add(s.expires)}
	if rec.State == idem.StateCompleted && rec.Result == nil {
		rec.Result = []byte{}
	}
	return rec
}

// checkRecord fails unless got is s as field returned it (and ScanRecord read it
// with the family's TimeUnit).
func (r *recordsBench[Tx]) checkRecord(t *testing.T, field string, got idem.Record, s seeded) {
	t.Helper()
	want := r.want(s)
	switch {
	case got.Key != want.Key:
		t.Errorf("RecordsSQL.%s returned key %v, want %v", field, got.Key, want.Key)
	case got.State != want.State || got.Token != want.Token:
		t.Errorf("RecordsSQL.%s of %v: state %d token %d, want state %d token %d (columns: state, fingerprint, token, result, created, expires)",
			field, s.key, got.State, got.Token, want.State, want.Token)
	case !bytes.Equal(got.Fingerprint, want.Fingerprint) || !bytes.Equal(got.Result, want.Result) || (got.Result == nil) != (want.Result == nil):
		t.Errorf("RecordsSQL.%s of %v: fingerprint %q result %q, want %q and %q (a NULL result is nil)",
			field, s.key, got.Fingerprint, got.Result, want.Fingerprint, want.Result)
	case got.CreatedAt.UnixMicro() != want.CreatedAt.UnixMicro() || got.ExpiresAt.UnixMicro() != want.ExpiresAt.UnixMicro():
		t.Errorf("RecordsSQL.%s of %v: created %v expires %v, want %v and %v (check RecordsSQL.TimeUnit)",
			field, s.key, got.CreatedAt, got.ExpiresAt, want.CreatedAt, want.ExpiresAt)
	}
}

// inspect runs Inspect; found is false when it returned no row.
func (r *recordsBench[Tx]) inspect(t *testing.T, k idem.Key) (rec idem.Record, found bool) {
	t.Helper()
	ctx := ctxFor(t)
	err := r.db.Auto(ctx, func(q idemsql.Querier) (err error) {
		rec, err = r.q.ScanRecord(q.QueryRow(ctx, r.q.Inspect, k.Scope, k.ID), k)
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return idem.Record{}, false
	}
	if err != nil {
		t.Fatalf("RecordsSQL.Inspect of %v: %v", k, err)
	}
	return rec, true
}

func (r *recordsBench[Tx]) testInspect(t *testing.T) {
	for _, s := range seeds {
		rec, found := r.inspect(t, s.key)
		if !found {
			t.Fatalf("RecordsSQL.Inspect of %v returned no row (an expired record must show too)", s.key)
		}
		r.checkRecord(t, "Inspect", rec, s)
	}
	if _, found := r.inspect(t, idem.Key{Scope: "dt-a", ID: "absent"}); found {
		t.Errorf("RecordsSQL.Inspect returned a row for a key with no record")
	}
}

// list runs List and returns its ids, checking each row against its seed.
func (r *recordsBench[Tx]) list(t *testing.T, scope, after string, rows int) []string {
	t.Helper()
	ctx := ctxFor(t)
	var ids []string
	err := r.query(ctx, r.q.List, []any{scope, after, rows}, func(rs idemsql.Rows) error {
		var id string
		rec, err := r.q.ScanRecord(rs, idem.Key{Scope: scope}, &id)
		if err != nil {
			return err
		}
		rec.Key.ID = id
		ids = append(ids, id)
		for _, s := range seeds {
			if s.key == rec.Key {
				r.checkRecord(t, "List", rec, s)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("RecordsSQL.List(%q, after %q, %d rows): %v", scope, after, rows, err)
	}
	return ids
}

func (r *recordsBench[Tx]) testList(t *testing.T) {
	for _, c := range []struct {
		scope, after string
		rows         int
		want         []string
	}{
		{"dt-a", "", 2, []string{"k1", "k2"}},
		{"dt-a", "k1", 10, []string{"k2", "k3"}},
		{"dt-a", "k3", 10, nil},
		{"dt-b", "", 10, []string{"k1"}},
		{"dt-none", "", 10, nil},
	} {
		if got := r.list(t, c.scope, c.after, c.rows); !slices.Equal(got, c.want) {
			t.Errorf("RecordsSQL.List(%q, after %q, %d rows) returned ids %q, want %q (ascending, after the cursor, at most the rows asked)",
				c.scope, c.after, c.rows, got, c.want)
		}
	}
}

func (r *recordsBench[Tx]) testScopes(t *testing.T) {
	ctx := ctxFor(t)
	for _, c := range []struct {
		after string
		rows  int
		want  []string
	}{
		{"", 10, []string{"dt-a", "dt-b", "dt-c"}},
		{"", 2, []string{"dt-a", "dt-b"}},
		{"dt-a", 1, []string{"dt-b"}},
		{"dt-c", 10, nil},
	} {
		var got []string
		err := r.query(ctx, r.q.Scopes, []any{c.after, c.rows}, func(rs idemsql.Rows) error {
			var scope string
			err := rs.Scan(&scope)
			got = append(got, scope)
			return err
		})
		if err != nil {
			t.Fatalf("RecordsSQL.Scopes(after %q, %d rows): %v", c.after, c.rows, err)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("RecordsSQL.Scopes(after %q, %d rows) returned %q, want %q (ascending, each once, after the cursor)",
				c.after, c.rows, got, c.want)
		}
	}
}

func (r *recordsBench[Tx]) testCount(t *testing.T) {
	ctx := ctxFor(t)
	var n *float64
	if err := r.db.Auto(ctx, func(q idemsql.Querier) error { return q.QueryRow(ctx, r.q.Count).Scan(&n) }); err != nil {
		t.Fatalf("RecordsSQL.Count: %v", err)
	}
	if n != nil && *n < 0 {
		t.Errorf("RecordsSQL.Count returned %v, want a count (or NULL where there is no estimate)", *n)
	}
}

// query runs a statement returning rows outside any transaction.
func (r *recordsBench[Tx]) query(ctx context.Context, query string, args []any, each func(idemsql.Rows) error) error {
	return r.db.Auto(ctx, func(q idemsql.Querier) error { return idemsql.EachRow(ctx, q, query, args, each) })
}
