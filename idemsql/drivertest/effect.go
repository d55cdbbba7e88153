package drivertest

import (
	"cmp"
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/migrate"
)

// Effect checks the Driver's EffectSQL on a database from db: each statement, as
// package effect runs it (arguments in its order, columns in its order), on
// idem_effects made by package migrate.
func Effect(t *testing.T, db func(t *testing.T) idemsql.TxDB[*sql.Tx]) {
	runFamily(t, db, "EffectSQL", idemsql.Driver.Effect, []migrate.Set{migrate.Effect, migrate.Saga},
		checkEffectFence, checkEffectRecover, checkEffectGroup, checkEffectList, checkEffectSweep, checkEffectRecord, checkEffectGroupKeyed)
}

// effectRow is an effect as EffectSQL.Get reads it.
type effectRow struct {
	key, step, state, reason                 string
	token, attempts, lease, created, updated int64
	result                                   []byte
}

func getEffect(c *stmtCheck, s *idemsql.EffectSQL, key, step string) effectRow {
	c.t.Helper()
	var e effectRow
	c.one("Get", s.Get, []any{key, step}, &e.key, &e.step, &e.state, &e.token, &e.attempts, &e.reason,
		&e.lease, &e.created, &e.updated, &e.result)
	return e
}

// checkEffectFence runs a fence's life: insert, lock, takeover, renew, finish,
// release, each checked through Get.
func checkEffectFence(c *stmtCheck, s *idemsql.EffectSQL) {
	c.t.Helper()
	c.affects("Insert", 1, "a new effect", s.Insert, "k1", "charge", int64(1100), int64(1000))
	c.affects("Insert", 0, "an effect that exists", s.Insert, "k1", "charge", int64(9999), int64(1001))
	e := getEffect(c, s, "k1", "charge")
	c.equal("Insert", "the row (Get)", e, effectRow{key: "k1", step: "charge", state: "pending", token: 1, attempts: 1,
		lease: 1100, created: 1000, updated: 1000})

	var state, reason string
	var token, until int64
	var result []byte
	err := c.db.InTx(context.Background(), func(tx *sql.Tx) error {
		return c.db.Querier(tx).QueryRow(context.Background(), s.Lock, "k1", "charge").Scan(&state, &token, &until, &result, &reason)
	})
	if err != nil {
		c.fatalf("Lock", "%v\n%s", err, s.Lock)
	}
	c.equal("Lock", "state, token, lease_until, result, reason", []any{state, token, until, result, reason},
		[]any{"pending", 1, 1100, []byte(nil), ""})

	c.affects("Takeover", 1, "the effect", s.Takeover, int64(2), int64(2200), int64(2000), "k1", "charge")
	e = getEffect(c, s, "k1", "charge")
	c.equal("Takeover", "token, lease_until, attempts, updated_at", []int64{e.token, e.lease, e.attempts, e.updated}, []int64{2, 2200, 2, 2000})

	c.affects("Renew", 0, "under a stale token", s.Renew, int64(3300), int64(3000), "k1", "charge", int64(1))
	c.affects("Renew", 1, "under the token", s.Renew, int64(3300), int64(3000), "k1", "charge", int64(2))
	e = getEffect(c, s, "k1", "charge")
	c.equal("Renew", "lease_until, updated_at", []int64{e.lease, e.updated}, []int64{3300, 3000})

	c.affects("Release", 0, "under a stale token", s.Release, int64(3500), "k1", "charge", int64(1))
	c.affects("Release", 1, "under the token", s.Release, int64(3500), "k1", "charge", int64(2))
	e = getEffect(c, s, "k1", "charge")
	c.equal("Release", "lease_until, updated_at", []int64{e.lease, e.updated}, []int64{0, 3500})

	c.affects("Finish", 0, "under a stale token", s.Finish, "complete", []byte("r"), "", int64(4000), "k1", "charge", int64(1))
	c.affects("Finish", 1, "under the token", s.Finish, "complete", []byte("r"), "", int64(4000), "k1", "charge", int64(2))
	e = getEffect(c, s, "k1", "charge")
	c.equal("Finish", "state, result, updated_at", []any{e.state, string(e.result), e.updated}, []any{"complete", "r", 4000})
	c.affects("Finish", 0, "a complete effect", s.Finish, "failed", nil, "no", int64(4100), "k1", "charge", int64(2))
	c.affects("Renew", 0, "a complete effect", s.Renew, int64(5000), int64(4200), "k1", "charge", int64(2))
	c.affects("Release", 0, "a complete effect", s.Release, int64(4200), "k1", "charge", int64(2))

	c.affects("Insert", 1, "a new effect", s.Insert, "k2", "charge", int64(1100), int64(1000))
	c.affects("Finish", 1, "a failure", s.Finish, "failed", nil, "declined", int64(1200), "k2", "charge", int64(1))
	e = getEffect(c, s, "k2", "charge")
	c.equal("Finish", "state, reason", []string{e.state, e.reason}, []string{"failed", "declined"})
	c.none("Get", "an effect that does not exist", s.Get, "k3", "charge")
}

// checkEffectRecover checks the statements of Recover: Due and PushBack.
func checkEffectRecover(c *stmtCheck, s *idemsql.EffectSQL) {
	c.t.Helper()
	for i, k := range []string{"r1", "r2", "r3", "r4"} {
		c.affects("Insert", 1, "a new effect", s.Insert, k, "ship", int64(500-100*i), int64(10))
	}
	c.affects("Insert", 1, "a new effect", s.Insert, "r5", "ship", int64(9000), int64(10))
	c.affects("Insert", 1, "a new effect", s.Insert, "r6", "other", int64(100), int64(10))
	c.affects("Finish", 1, "the effect", s.Finish, "complete", nil, "", int64(20), "r4", "ship", int64(1))
	// r3 (lease 300), r2 (400), r1 (500) are due at 1000; r4 is complete, r5's lease
	// runs, r6 is of another step.
	c.equal("Due", "keys due at 1000, limit 2", c.strings("Due", s.Due, "ship", int64(1000), 2), []string{"r3", "r2"})
	c.equal("Due", "keys due at 1000", c.strings("Due", s.Due, "ship", int64(1000), 10), []string{"r3", "r2", "r1"})

	c.affects("PushBack", 1, "a due effect", s.PushBack, int64(1000), "r3", "ship")
	c.equal("PushBack", "lease_until", getEffect(c, s, "r3", "ship").lease, 1000)
	c.affects("PushBack", 0, "an effect whose lease runs", s.PushBack, int64(1000), "r5", "ship")
	c.affects("PushBack", 0, "a complete effect", s.PushBack, int64(1000), "r4", "ship")
	c.equal("Due", "keys due at 1000 after PushBack", c.strings("Due", s.Due, "ship", int64(1000), 10), []string{"r2", "r1", "r3"})
}

// checkEffectGroup checks GroupInsert and GroupFinish, where the driver has them.
func checkEffectGroup(c *stmtCheck, s *idemsql.EffectSQL) {
	c.t.Helper()
	if s.GroupInsert == "" {
		if s.GroupFinish != "" || s.GroupRecord != "" || s.GroupLook != "" {
			c.fatalf("GroupFinish", "GroupFinish, GroupRecord or GroupLook is set without GroupInsert")
		}
		return
	}
	c.affects("Insert", 1, "a new effect", s.Insert, "g2", "charge", int64(100), int64(10))
	var got []string
	c.rows("GroupInsert", s.GroupInsert, []any{[]string{"g3", "g1", "g2"}, []string{"charge", "charge", "charge"},
		[]int64{300, 100, 200}, []int64{30, 10, 20}}, func(r idemsql.Rows) error {
		var k, st string
		err := r.Scan(&k, &st)
		got = append(got, k+"/"+st)
		return err
	})
	slices.Sort(got)
	c.equal("GroupInsert", "the rows it returned", got, []string{"g1/charge", "g3/charge"})
	e := getEffect(c, s, "g3", "charge")
	c.equal("GroupInsert", "g3's row", e, effectRow{key: "g3", step: "charge", state: "pending", token: 1, attempts: 1,
		lease: 300, created: 30, updated: 30})

	got = nil
	c.rows("GroupFinish", s.GroupFinish, []any{[]string{"g1", "g3"}, []string{"charge", "charge"}, []int64{1, 7},
		[]string{"complete", "failed"}, [][]byte{[]byte("ok"), nil}, []string{"", "no"}, []int64{40, 40}}, func(r idemsql.Rows) error {
		var k, st string
		var token int64
		err := r.Scan(&k, &st, &token)
		got = append(got, k+"/"+st)
		return err
	})
	c.equal("GroupFinish", "the rows it returned (g3 is held by token 1, not 7)", got, []string{"g1/charge"})
	e = getEffect(c, s, "g1", "charge")
	c.equal("GroupFinish", "g1's state, result, updated_at", []any{e.state, string(e.result), e.updated}, []any{"complete", "ok", 40})
	c.equal("GroupFinish", "g3's state", getEffect(c, s, "g3", "charge").state, "pending")
}

// checkEffectList pages through the effects checkEffectFence and
// checkEffectRecover left with each filter of List.
func checkEffectList(c *stmtCheck, s *idemsql.EffectSQL) {
	c.t.Helper()
	list := func(state, pastLease, key, after bool, args ...any) []string {
		c.t.Helper()
		var out []string
		c.rows("List", s.List(state, pastLease, key, after), args, func(r idemsql.Rows) error {
			var e effectRow
			err := r.Scan(&e.key, &e.step, &e.state, &e.token, &e.attempts, &e.reason, &e.lease, &e.created, &e.updated)
			out = append(out, e.key+"/"+e.step+"/"+e.state)
			return err
		})
		return out
	}
	all := list(false, false, false, false, 100)
	if len(all) < 8 || !slices.IsSortedFunc(all, compareKeyStep) {
		c.fatalf("List", "every effect = %v: want them all, in (key, step) order", all)
	}
	c.equal("List", "the first 2", list(false, false, false, false, 2), all[:2])
	c.equal("List", "after k1/charge, 2", list(false, false, false, true, "k1", "charge", 2), []string{"k2/charge/failed", "r1/ship/pending"})
	c.equal("List", "state failed", list(true, false, false, false, "failed", 100), []string{"k2/charge/failed"})
	c.equal("List", "state pending past their lease at 1000, after r1/ship",
		list(true, true, false, true, "pending", int64(1000), "r1", "ship", 100), []string{"r2/ship/pending", "r3/ship/pending", "r6/other/pending"})
	c.equal("List", "key r1", list(false, false, true, false, "r1", 100), []string{"r1/ship/pending"})
	c.equal("List", "state complete (never listed by state)", list(true, false, false, false, "complete", 100), []string(nil))
}

// compareKeyStep orders "key/step/state" strings by key, then step.
func compareKeyStep(a, b string) int {
	pa, pb := strings.SplitN(a, "/", 3), strings.SplitN(b, "/", 3)
	return cmp.Or(cmp.Compare(pa[0], pb[0]), cmp.Compare(pa[1], pb[1]))
}

// checkEffectSweep deletes complete effects by age and batch, and keeps a running
// saga's with SweepKeepingSagas.
func checkEffectSweep(c *stmtCheck, s *idemsql.EffectSQL) {
	c.t.Helper()
	if n := c.exec("Sweep", s.Sweep, int64(100), 100); n < 1 {
		c.fatalf("Sweep", "deleted %d effects complete before 100, want r4's at least", n)
	}
	c.none("Sweep", "r4's effect, complete at 20, after a sweep before 100", s.Get, "r4", "ship")
	c.equal("Sweep", "k1's state (complete at 4000, after the cutoff)", getEffect(c, s, "k1", "charge").state, "complete")
	for _, k := range []string{"w1", "w2", "w3", "w4"} {
		c.affects("Insert", 1, "a new effect", s.Insert, k, "do:x", int64(0), int64(10))
		c.affects("Finish", 1, "the effect", s.Finish, "complete", nil, "", int64(150), k, "do:x", int64(1))
	}
	c.affects("Insert", 1, "a new effect", s.Insert, "w5", "do:x", int64(0), int64(10))
	c.affects("Finish", 1, "the effect", s.Finish, "complete", nil, "", int64(5000), "w5", "do:x", int64(1))
	c.affects("Insert", 1, "a new effect", s.Insert, "w6", "do:x", int64(0), int64(10)) // pending: never swept

	// w1 is the step of a running saga; w2's saga has completed.
	sagaRow := func(id, state string) {
		c.t.Helper()
		c.exec("SweepKeepingSagas", `INSERT INTO idem_sagas (id, saga, state, step, data, results, attempts, reason,
			next_at, lease_until, token, created_at, updated_at) VALUES ($1, 'order', $2, 0, $3, '{}', 0, '', 0, 0, 0, 0, 0)`, id, state, []byte{})
	}
	sagaRow("w1", "running")
	sagaRow("w2", "completed")
	c.affects("SweepKeepingSagas", 1, "complete effects before 200, limit 1", s.SweepKeepingSagas, int64(200), 1)
	c.affects("SweepKeepingSagas", 2, "complete effects before 200 but w1 (its saga runs), limit 10", s.SweepKeepingSagas, int64(200), 10)
	c.none("SweepKeepingSagas", "the effects of w2 (its saga completed) after two sweeps", s.Get, "w2", "do:x")
	getEffect(c, s, "w1", "do:x")
	c.affects("Sweep", 1, "complete effects before 200 (w1)", s.Sweep, int64(200), 10)
	c.none("Sweep", "w1's effect after the sweep", s.Get, "w1", "do:x")
	c.affects("Sweep", 0, "complete effects before 200", s.Sweep, int64(200), 10)
	getEffect(c, s, "w5", "do:x")
	getEffect(c, s, "w6", "do:x")
}

// checkEffectRecord checks Record, the keyed path's one write: a finished effect
// with no PENDING before it, never over a row that exists.
func checkEffectRecord(c *stmtCheck, s *idemsql.EffectSQL) {
	c.t.Helper()
	c.affects("Insert", 1, "a new effect", s.Insert, "k5", "record", int64(1100), int64(1000))
	c.affects("Record", 1, "a new effect", s.Record, "k4", "record", "complete", []byte("r4"), "", int64(5000))
	c.affects("Record", 0, "an effect that exists", s.Record, "k4", "record", "failed", nil, "no", int64(5100))
	c.affects("Record", 0, "an effect of the two-write fence", s.Record, "k5", "record", "complete", []byte("x"), "", int64(5100))
	e := getEffect(c, s, "k4", "record")
	c.equal("Record", "the row (Get)", e, effectRow{key: "k4", step: "record", state: "complete", token: 1, attempts: 1,
		result: []byte("r4"), created: 5000, updated: 5000})
}

// checkEffectGroupKeyed checks the keyed path's statements over arrays: GroupRecord
// records only the effects without a row, GroupLook reads those that exist.
func checkEffectGroupKeyed(c *stmtCheck, s *idemsql.EffectSQL) {
	c.t.Helper()
	if s.GroupInsert == "" {
		return
	}
	if s.GroupRecord == "" || s.GroupLook == "" {
		c.fatalf("GroupRecord", "GroupRecord and GroupLook are needed beside GroupInsert")
	}
	c.affects("Record", 1, "a new effect", s.Record, "g1", "keyed", "complete", []byte("ok"), "", int64(40))
	var got []string
	c.rows("GroupRecord", s.GroupRecord, []any{[]string{"g5", "g1", "g4"}, []string{"keyed", "keyed", "keyed"},
		[]string{"complete", "complete", "failed"}, [][]byte{[]byte("r5"), []byte("x"), nil}, []string{"", "", "no"},
		[]int64{50, 50, 50}}, func(r idemsql.Rows) error {
		var k, st string
		err := r.Scan(&k, &st)
		got = append(got, k+"/"+st)
		return err
	})
	slices.Sort(got)
	c.equal("GroupRecord", "the rows it returned (g1 exists)", got, []string{"g4/keyed", "g5/keyed"})
	e := getEffect(c, s, "g5", "keyed")
	c.equal("GroupRecord", "g5's row", e, effectRow{key: "g5", step: "keyed", state: "complete", token: 1, attempts: 1,
		result: []byte("r5"), created: 50, updated: 50})

	got = nil
	c.rows("GroupLook", s.GroupLook, []any{[]string{"g4", "g9", "g5", "g1"}, []string{"keyed", "keyed", "keyed", "keyed"}},
		func(r idemsql.Rows) error {
			var k, st, state, reason string
			var result []byte
			err := r.Scan(&k, &st, &state, &result, &reason)
			got = append(got, k+"/"+st+"/"+state+"/"+string(result)+"/"+reason)
			return err
		})
	slices.Sort(got)
	c.equal("GroupLook", "the rows it returned (g9 does not exist)", got,
		[]string{"g1/keyed/complete/ok/", "g4/keyed/failed//no", "g5/keyed/complete/r5/"})
}
