package saga

import (
	"cmp"
	"context"
	"slices"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/group"
)

// Group saves, where the driver has a statement over arrays (SagaSQL.GroupSave:
// PostgreSQL's unnest): the saves of concurrent sagas share one statement and one
// commit, as the fence's writes do (package effect, internal/group). A save that
// finds a runner free writes alone, as Save; saves that find both runners busy wait
// for the next free one, which writes them in one statement, each row under its own
// token, so a batch fences exactly as single saves would. A batch that fails (a
// deadlock, a lost connection) is written again save by save, each alone.

// saveRunners is how many saves or batches of saves run at once per Orchestrator.
const saveRunners = 2

// maxSaves bounds the sagas of one batch.
const maxSaves = 64

type saveCall struct {
	state, results, reason  string
	step, attempts          int
	next, lease, now, token int64
	id                      string
	saved                   bool // the answer: the row held token and is written
}

// newSaves returns the orchestrator's batcher of saves, or nil where the driver
// has no GroupSave (SQLite, MySQL) or db cannot run a statement outside a
// transaction: there each save writes alone.
func (o *Orchestrator[Tx]) newSaves() *group.Batcher[saveCall] {
	if o.stmts.GroupSave == "" || o.db.Read == nil {
		return nil
	}
	return &group.Batcher[saveCall]{Runners: saveRunners, Max: maxSaves, Run: o.saveBatch}
}

// write runs one save, alone or in a batch, and reports whether token still held
// the saga.
func (o *Orchestrator[Tx]) write(ctx context.Context, v saveCall) (bool, error) {
	if o.saves == nil {
		return o.saveOne(ctx, v)
	}
	it, err := o.saves.Do(ctx, v)
	return err == nil && it.Val.saved, err
}

// saveOne is Save, one autocommit statement where the database can.
func (o *Orchestrator[Tx]) saveOne(ctx context.Context, v saveCall) (bool, error) {
	var n int64
	err := o.db.Auto(ctx, func(q idemsql.Querier) (err error) {
		n, err = q.Exec(ctx, o.stmts.Save, v.state, v.step, v.results, v.attempts, v.reason, v.next, v.lease, v.now, v.id, v.token)
		return err
	})
	return n == 1, err
}

func (o *Orchestrator[Tx]) saveBatch(batch []*group.Item[saveCall]) {
	if len(batch) == 1 {
		it := batch[0]
		var err error
		it.Val.saved, err = o.saveOne(it.Ctx, it.Val)
		it.Finish(err)
		return
	}
	slices.SortStableFunc(batch, func(a, b *group.Item[saveCall]) int { return cmp.Compare(a.Val.id, b.Val.id) })
	var states, results, reasons, ids []string
	var steps, attempts, nexts, leases, nows, tokens []int64
	for _, it := range batch {
		v := it.Val
		states, results, reasons, ids = append(states, v.state), append(results, v.results), append(reasons, v.reason), append(ids, v.id)
		steps, attempts = append(steps, int64(v.step)), append(attempts, int64(v.attempts))
		nexts, leases, nows, tokens = append(nexts, v.next), append(leases, v.lease), append(nows, v.now), append(tokens, v.token)
	}
	type row struct {
		id    string
		token int64
	}
	saved := map[row]bool{}
	ctx, cancel := group.Context(batch)
	defer cancel()
	args := []any{states, steps, results, attempts, reasons, nexts, leases, nows, ids, tokens}
	err := o.db.Read(ctx, func(q idemsql.Querier) error {
		return idemsql.EachRow(ctx, q, o.stmts.GroupSave, args, func(r idemsql.Rows) error {
			var w row
			if err := r.Scan(&w.id, &w.token); err != nil {
				return err
			}
			saved[w] = true
			return nil
		})
	})
	if err != nil {
		for _, it := range batch {
			go o.saveBatch([]*group.Item[saveCall]{it})
		}
		return
	}
	for _, it := range batch {
		w := row{it.Val.id, it.Val.token}
		it.Val.saved = saved[w]
		delete(saved, w) // one row written once: a second save of it in the batch did not write
		it.Finish(nil)
	}
}
