package drivertest

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"testing"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/migrate"
)

// Saga checks the Driver's SagaSQL on a database from db: each statement, as
// package effect/saga runs it (arguments in its order, columns in its order), on
// idem_sagas, idem_saga_resolutions and idem_effects made by package migrate.
func Saga(t *testing.T, db func(t *testing.T) idemsql.TxDB[*sql.Tx]) {
	runFamily(t, db, "SagaSQL", idemsql.Driver.Saga, []migrate.Set{migrate.Effect, migrate.Saga},
		checkSagaRun, checkSagaAdmin, checkSagaSweep, checkSagaGroupSave)
}

// checkSagaGroupSave runs GroupSave, where the driver has it: each row is written
// under its own token only, and the statement returns the ones it wrote.
func checkSagaGroupSave(c *stmtCheck, s *idemsql.SagaSQL) {
	c.t.Helper()
	if s.GroupSave == "" {
		return
	}
	c.affects("Insert", 1, "a new saga, leased", s.Insert, "gs1", "order", []byte{}, int64(100), int64(9000), int64(1))
	c.affects("Insert", 1, "a new saga, leased", s.Insert, "gs2", "order", []byte{}, int64(100), int64(9000), int64(3))
	var got []string
	c.rows("GroupSave", s.GroupSave, []any{[]string{"running", "completed"}, []int64{1, 4}, []string{`{"a":"eA=="}`, `{}`},
		[]int64{0, 2}, []string{"", "done"}, []int64{200, 300}, []int64{9200, 0}, []int64{200, 300},
		[]string{"gs1", "gs2"}, []int64{2, 3}}, func(r idemsql.Rows) error {
		var id string
		var token int64
		err := r.Scan(&id, &token)
		got = append(got, fmt.Sprint(id, "/", token))
		return err
	})
	c.equal("GroupSave", "the rows it wrote (gs1's token is 1, not 2)", got, []string{"gs2/3"})
	c.equal("GroupSave", "gs2's row", readSagaRow(c, "Read", s.Read, "gs2"), sagaRow{saga: "order", state: "completed",
		results: `{}`, data: []byte{}, step: 4, attempts: 2, reason: "done", token: 3, next: 300, created: 100, updated: 300})
	c.equal("GroupSave", "gs1's row (not written)", readSagaRow(c, "Read", s.Read, "gs1"), sagaRow{saga: "order",
		state: "running", results: "{}", data: []byte{}, token: 1, next: 100, lease: 9000, created: 100, updated: 100})
}

// parkedMark is a parked saga's next_at.
const parkedMark int64 = math.MaxInt64

// sagaRow is a saga as SagaSQL.Read reads it.
type sagaRow struct {
	saga, state, results, reason string
	data                         []byte
	step, attempts               int
	token, next, lease           int64
	created, updated             int64
}

func readSagaRow(c *stmtCheck, field, stmt, id string) sagaRow {
	c.t.Helper()
	var r sagaRow
	c.one(field, stmt, []any{id}, &r.saga, &r.state, &r.step, &r.data, &r.results, &r.attempts, &r.reason,
		&r.token, &r.next, &r.lease, &r.created, &r.updated)
	return r
}

// checkSagaRun runs the orchestrator's statements: insert, poll, lease, read,
// save, park.
func checkSagaRun(c *stmtCheck, s *idemsql.SagaSQL) {
	c.t.Helper()
	c.affects("Insert", 1, "a new saga", s.Insert, "s1", "order", []byte("in"), int64(1000), int64(0), int64(0))
	c.affects("Insert", 0, "a saga that exists", s.Insert, "s1", "other", []byte("x"), int64(1001), int64(5), int64(5))
	c.affects("Insert", 1, "a new saga, leased", s.Insert, "s2", "order", []byte{}, int64(1100), int64(9000), int64(1))
	c.affects("Insert", 1, "a new saga of another name", s.Insert, "s3", "refund", []byte{}, int64(900), int64(0), int64(0))
	r := readSagaRow(c, "Read", s.Read, "s1")
	c.equal("Insert", "the row (Read)", r, sagaRow{saga: "order", state: "running", results: "{}", data: []byte("in"),
		next: 1000, created: 1000, updated: 1000})
	c.equal("Insert", "s2's lease_until and token (Read)", []int64{readSagaRow(c, "Read", s.Read, "s2").lease,
		readSagaRow(c, "Read", s.Read, "s2").token}, []int64{9000, 1})

	poll := func(now int64, names ...any) []string {
		c.t.Helper()
		return c.strings("Poll", s.Poll(len(names), 10), append([]any{now}, names...)...)
	}
	c.equal("Poll", "due at 2000 of order and refund", poll(2000, "order", "refund"), []string{"s3", "s1"})
	c.equal("Poll", "due at 2000 of order", poll(2000, "order"), []string{"s1"})
	c.equal("Poll", "due at 2000 of no name", poll(2000), []string(nil))
	c.equal("Poll", "due at 950 of order", poll(950, "order"), []string(nil))
	c.equal("Poll", "due at 2000, limit 1", c.strings("Poll", s.Poll(2, 1), int64(2000), "order", "refund"), []string{"s3"})

	lease := func(id string, now int64, names ...any) int64 {
		c.t.Helper()
		return c.exec("Lease", s.Lease(len(names)), append([]any{now + 500, id, now}, names...)...)
	}
	c.equal("Lease", "rows affected leasing s1 of refund", lease("s1", 2000, "refund"), 0)
	c.equal("Lease", "rows affected leasing s2, leased until 9000, at 2000", lease("s2", 2000, "order"), 0)
	c.equal("Lease", "rows affected leasing s1 at 2000", lease("s1", 2000, "order", "refund"), 1)
	r = readSagaRow(c, "Read", s.Read, "s1")
	c.equal("Lease", "s1's lease_until and token", []int64{r.lease, r.token}, []int64{2500, 1})
	c.equal("Lease", "rows affected leasing s1 again at 2100", lease("s1", 2100, "order"), 0)

	var locked sagaRow
	err := c.db.InTx(context.Background(), func(tx *sql.Tx) error {
		return idemsql.EachRow(context.Background(), c.db.Querier(tx), s.ReadForUpdate, []any{"s1"}, func(rows idemsql.Rows) error {
			return rows.Scan(&locked.saga, &locked.state, &locked.step, &locked.data, &locked.results, &locked.attempts,
				&locked.reason, &locked.token, &locked.next, &locked.lease, &locked.created, &locked.updated)
		})
	})
	if err != nil {
		c.fatalf("ReadForUpdate", "%v\n%s", err, s.ReadForUpdate)
	}
	c.equal("ReadForUpdate", "s1's row", locked, r)

	c.affects("Save", 0, "under a stale token", s.Save, "compensating", 1, `{"a":"eA=="}`, 2, "why", int64(3000), int64(0), int64(2200), "s1", int64(0))
	c.affects("Save", 1, "under the token", s.Save, "compensating", 1, `{"a":"eA=="}`, 2, "why", int64(3000), int64(0), int64(2200), "s1", int64(1))
	r = readSagaRow(c, "Read", s.Read, "s1")
	c.equal("Save", "s1's row", r, sagaRow{saga: "order", state: "compensating", results: `{"a":"eA=="}`, data: []byte("in"),
		step: 1, attempts: 2, reason: "why", token: 1, next: 3000, created: 1000, updated: 2200})

	c.affects("Park", 0, "under a stale token", s.Park, parkedMark, "parked", int64(2300), "s3", int64(1))
	c.affects("Park", 1, "under the token", s.Park, parkedMark, "parked", int64(2300), "s3", int64(0))
	r = readSagaRow(c, "Read", s.Read, "s3")
	c.equal("Park", "s3's next_at, lease_until, reason, updated_at", []any{r.next, r.lease, r.reason, r.updated},
		[]any{parkedMark, 0, "parked", 2300})
	c.equal("Poll", "due just before the parked mark", poll(parkedMark-1, "order", "refund"), []string{"s2", "s1"})
	c.equal("ParkedIDs", "the parked sagas", c.strings("ParkedIDs", s.ParkedIDs, parkedMark, 10), []string{"s3"})
	c.equal("IDs", "every saga, oldest first", c.strings("IDs", s.IDs, "", 10), []string{"s3", "s1", "s2"})
	c.equal("IDs", "every saga, limit 2", c.strings("IDs", s.IDs, "", 2), []string{"s3", "s1"})
	c.equal("IDs", "running sagas", c.strings("IDs", s.IDs, "running", 10), []string{"s3", "s2"})
}

// checkSagaAdmin runs the operator's statements: list, retry, resolve, and the
// resolution's and the failed compensation's.
func checkSagaAdmin(c *stmtCheck, s *idemsql.SagaSQL) {
	c.t.Helper()
	list := func(state, parked, after bool, args ...any) []string {
		c.t.Helper()
		var out []string
		c.rows("List", s.List(state, parked, after), args, func(r idemsql.Rows) error {
			var id, saga, st, reason string
			var step, attempts int
			var created, updated, next int64
			err := r.Scan(&id, &saga, &st, &step, &attempts, &reason, &created, &updated, &next)
			out = append(out, id+"/"+st)
			return err
		})
		return out
	}
	c.equal("List", "every saga", list(false, false, false, 10), []string{"s1/compensating", "s2/running", "s3/running"})
	c.equal("List", "after s1, limit 1", list(false, false, true, "s1", 1), []string{"s2/running"})
	c.equal("List", "running", list(true, false, false, "running", 10), []string{"s2/running", "s3/running"})
	c.equal("List", "running after s2", list(true, false, true, "running", "s2", 10), []string{"s3/running"})
	c.equal("List", "parked", list(false, true, false, parkedMark, 10), []string{"s3/running"})
	c.equal("List", "parked after s3", list(false, true, true, parkedMark, "s3", 10), []string(nil))

	c.affects("Retry", 0, "in another state", s.Retry, "compensating", int64(4000), "retried", int64(4001), "s1", "failed", int64(1))
	c.affects("Retry", 0, "under a stale token", s.Retry, "compensating", int64(4000), "retried", int64(4001), "s1", "compensating", int64(0))
	c.affects("Retry", 1, "in its state under its token", s.Retry, "compensating", int64(4000), "retried", int64(4001), "s1", "compensating", int64(1))
	r := readSagaRow(c, "Read", s.Read, "s1")
	c.equal("Retry", "s1's state, attempts, next_at, reason, lease_until, token, updated_at",
		[]any{r.state, r.attempts, r.next, r.reason, r.lease, r.token, r.updated}, []any{"compensating", 0, 4000, "retried", 0, 2, 4001})

	c.affects("InsertResolution", 1, "a resolution", s.InsertResolution, "s2", "running", "done by hand", int64(5000))
	var note, previous string
	var at int64
	c.one("ReadResolution", s.ReadResolution, []any{"s2"}, &note, &at, &previous)
	c.equal("ReadResolution", "note, resolved_at, previous_state", []any{note, at, previous}, []any{"done by hand", 5000, "running"})
	c.none("ReadResolution", "a saga without one", s.ReadResolution, "s1")
	c.affects("Resolve", 0, "under a stale token", s.Resolve, "resolved", int64(5000), "s2", "running", int64(0))
	c.affects("Resolve", 1, "in its state under its token", s.Resolve, "resolved", int64(5000), "s2", "running", int64(1))
	r = readSagaRow(c, "Read", s.Read, "s2")
	c.equal("Resolve", "s2's state, lease_until, token, updated_at", []any{r.state, r.lease, r.token, r.updated}, []any{"resolved", 0, 2, 5000})

	e := c.db.Driver.Effect()
	for _, step := range []string{"do:a", "undo:a", "undo:b"} {
		c.affects("RetryUndo", 1, "a new effect (EffectSQL.Insert)", e.Insert, "s1", step, int64(100), int64(10))
		c.affects("RetryUndo", 1, "a failure (EffectSQL.Finish)", e.Finish, "failed", nil, "no", int64(20), "s1", step, int64(1))
	}
	c.affects("RetryUndo", 2, "s1's failed undo steps", s.RetryUndo, int64(6000), "s1")
	var state, reason string
	var token, lease, updated int64
	c.one("RetryUndo", `SELECT state, token, lease_until, reason, updated_at FROM idem_effects WHERE step = $1`, []any{"undo:b"},
		&state, &token, &lease, &reason, &updated)
	c.equal("RetryUndo", "undo:b's state, token, lease_until, reason, updated_at", []any{state, token, lease, reason, updated},
		[]any{"pending", 2, 0, "", 6000})
	c.one("RetryUndo", `SELECT state, token, lease_until, reason, updated_at FROM idem_effects WHERE step = $1`, []any{"do:a"},
		&state, &token, &lease, &reason, &updated)
	c.equal("RetryUndo", "do:a's state (not a compensation)", state, "failed")
}

// checkSagaSweep deletes finished sagas with their step effects and resolutions.
func checkSagaSweep(c *stmtCheck, s *idemsql.SagaSQL) {
	c.t.Helper()
	// s2 is resolved at 5000 (with a resolution), s4 completed at 100, s5 compensated
	// at 9000; s1 compensates and s3 runs.
	c.affects("Insert", 1, "a new saga", s.Insert, "s4", "order", []byte{}, int64(50), int64(0), int64(0))
	c.affects("Save", 1, "a saga's end", s.Save, "completed", 2, "{}", 0, "", int64(100), int64(0), int64(100), "s4", int64(0))
	c.affects("Insert", 1, "a new saga", s.Insert, "s5", "order", []byte{}, int64(50), int64(0), int64(0))
	c.affects("Save", 1, "a saga's end", s.Save, "compensated", -1, "{}", 0, "", int64(9000), int64(0), int64(9000), "s5", int64(0))
	e := c.db.Driver.Effect()
	for _, k := range []string{"s2", "s4"} {
		for _, step := range []string{"do:a", "undo:a", "other"} {
			c.affects("SweepEffects", 1, "a new effect (EffectSQL.Insert)", e.Insert, k, step, int64(0), int64(10))
		}
	}
	var ids []string
	err := c.db.InTx(context.Background(), func(tx *sql.Tx) error {
		ids = nil
		return idemsql.EachRow(context.Background(), c.db.Querier(tx), s.SweepIDs, []any{int64(6000), 10}, func(r idemsql.Rows) error {
			var id string
			err := r.Scan(&id)
			ids = append(ids, id)
			return err
		})
	})
	if err != nil {
		c.fatalf("SweepIDs", "%v\n%s", err, s.SweepIDs)
	}
	if len(ids) != 2 || !(ids[0] == "s2" && ids[1] == "s4" || ids[0] == "s4" && ids[1] == "s2") {
		c.fatalf("SweepIDs", "finished before 6000 = %v, want s2 and s4", ids)
	}
	c.equal("SweepIDs", "finished before 6000, limit 1 (how many)", len(c.strings("SweepIDs", s.SweepIDs, int64(6000), 1)), 1)
	args := []any{"s2", "s4"}
	c.affects("SweepEffects", 4, "the do: and undo: effects of s2 and s4", s.SweepEffects(2), args...)
	c.affects("SweepResolutions", 1, "the resolution of s2", s.SweepResolutions(2), args...)
	c.affects("SweepSagas", 2, "s2 and s4", s.SweepSagas(2), args...)
	c.equal("SweepSagas", "the sagas left", c.strings("IDs", s.IDs, "", 10), []string{"s5", "s3", "s1"})
	c.equal("SweepEffects", "the steps left of s2 and s4", c.strings("SweepEffects",
		`SELECT step FROM idem_effects WHERE step = 'other' ORDER BY step`), []string{"other", "other"})
	c.affects("SweepSagas", 1, "one saga", s.SweepSagas(1), "s5")
}
