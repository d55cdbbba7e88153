package effect

import (
	"cmp"
	"context"
	"slices"
	"sync/atomic"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/group"
)

// Group writes, where the driver has statements over arrays (EffectSQL.GroupInsert:
// PostgreSQL's unnest): concurrent Do calls share their PENDING inserts, and
// their COMPLETE and FAILED updates, through internal/group. A call that finds a
// runner free writes alone, one autocommit statement as on every database; calls that
// find both runners busy wait in a queue that the next free runner writes in one
// statement over arrays (unnest), one round trip and one commit for all of them. The
// statements are the single ones', row for row: the insert skips keys that exist (their
// callers then take the transaction path, as alone), and the update matches each row
// on its key, step and token, so a batch fences exactly as single updates would.
// Rows are written in (key, step) order, so two batches lock shared rows in one order;
// a batch that fails anyway (a deadlock, a lost connection) is written again call by
// call, each alone.

// groupRunners is how many writes or batches of one kind run at once per Fence.
const groupRunners = 2

// maxGroup bounds the rows of one batch.
const maxGroup = 64

// groups are a Fence's batchers; nil where the driver has no GroupInsert (SQLite,
// MySQL): there each call writes alone.
type groups struct {
	inserts  group.Batcher[insertCall]
	finishes group.Batcher[finishCall]
	records  group.Batcher[recordCall] // DoKeyed's (keyed.go)
	looks    group.Batcher[lookCall]   // DoKeyed's (keyed.go)
	batches  atomic.Int64              // statements that wrote more than one row's call, for tests
	keyedRTs atomic.Int64              // DoKeyed's statements, alone or in batches, for benchmarks
}

type insertCall struct {
	key, step  string
	lease, now int64
	acquired   bool // the answer: the row was inserted by this call
}

type finishCall struct {
	key, step, state, reason string
	token, now               int64
	result                   []byte
	done                     bool // the answer: the row held token and is now state
}

func (f *Fence[Tx]) newGroups() *groups {
	if f.q.GroupInsert == "" || f.db.Read == nil {
		return nil
	}
	g := &groups{}
	g.inserts = group.Batcher[insertCall]{Runners: groupRunners, Max: maxGroup, Run: f.insertBatch}
	g.finishes = group.Batcher[finishCall]{Runners: groupRunners, Max: maxGroup, Run: f.finishBatch}
	if f.q.GroupRecord != "" {
		g.records = group.Batcher[recordCall]{Runners: groupRunners, Max: maxGroup, Run: f.recordBatch}
		g.looks = group.Batcher[lookCall]{Runners: groupRunners, Max: maxGroup, Run: f.lookBatch}
	}
	return g
}

type recordCall struct {
	key, step, state, reason string
	result                   []byte
	now                      int64
	recorded                 bool // the answer: the row was inserted by this call
}

type lookCall struct {
	key, step string
	found     bool   // the answer: the effect exists,
	e         Effect // in this state, with this result and reason
}

// insertNew inserts key and step as PENDING with token 1, alone or in a batch, and
// reports whether it did (false: the effect exists).
func (f *Fence[Tx]) insertNew(ctx context.Context, key, step string, lease, now int64) (bool, error) {
	if f.groups == nil {
		n, err := f.exec(ctx, f.q.Insert, key, step, lease, now)
		return n == 1, err
	}
	it, err := f.groups.inserts.Do(ctx, insertCall{key: key, step: step, lease: lease, now: now})
	return err == nil && it.Val.acquired, err
}

// update sets the effect to state if token still holds it, alone or in a batch,
// and reports whether it did.
func (f *Fence[Tx]) update(ctx context.Context, key, step string, token int64, state string, result []byte, reason string) (bool, error) {
	now := f.cfg.Now().UnixNano()
	if f.groups == nil {
		n, err := f.exec(ctx, f.q.Finish, state, result, reason, now, key, step, token)
		return n == 1, err
	}
	it, err := f.groups.finishes.Do(ctx, finishCall{key: key, step: step, token: token, state: state, result: result, reason: reason, now: now})
	return err == nil && it.Val.done, err
}

func (f *Fence[Tx]) insertBatch(batch []*group.Item[insertCall]) {
	if len(batch) == 1 {
		it := batch[0]
		n, err := f.exec(it.Ctx, f.q.Insert, it.Val.key, it.Val.step, it.Val.lease, it.Val.now)
		it.Val.acquired = n == 1
		it.Finish(err)
		return
	}
	slices.SortStableFunc(batch, func(a, b *group.Item[insertCall]) int {
		return cmp.Or(cmp.Compare(a.Val.key, b.Val.key), cmp.Compare(a.Val.step, b.Val.step))
	})
	var keys, steps []string
	var leases, nows []int64
	for _, it := range batch {
		keys, steps = append(keys, it.Val.key), append(steps, it.Val.step)
		leases, nows = append(leases, it.Val.lease), append(nows, it.Val.now)
	}
	writeBatch(f, batch, f.q.GroupInsert, func(v insertCall) [2]string { return [2]string{v.key, v.step} },
		func(v *insertCall, ok bool) { v.acquired = ok }, f.insertBatch, keys, steps, leases, nows)
}

func (f *Fence[Tx]) finishBatch(batch []*group.Item[finishCall]) {
	if len(batch) == 1 {
		it, v := batch[0], batch[0].Val
		n, err := f.exec(it.Ctx, f.q.Finish, v.state, v.result, v.reason, v.now, v.key, v.step, v.token)
		it.Val.done = n == 1
		it.Finish(err)
		return
	}
	slices.SortStableFunc(batch, func(a, b *group.Item[finishCall]) int {
		return cmp.Or(cmp.Compare(a.Val.key, b.Val.key), cmp.Compare(a.Val.step, b.Val.step))
	})
	var keys, steps, states, reasons []string
	var tokens, nows []int64
	var results [][]byte
	for _, it := range batch {
		v := it.Val
		keys, steps, states, reasons = append(keys, v.key), append(steps, v.step), append(states, v.state), append(reasons, v.reason)
		tokens, nows, results = append(tokens, v.token), append(nows, v.now), append(results, v.result)
	}
	type row struct {
		key, step string
		token     int64
	}
	updated := map[row]bool{}
	err := runBatch(f, batch, f.q.GroupFinish, func(r idemsql.Rows) error {
		var w row
		if err := r.Scan(&w.key, &w.step, &w.token); err != nil {
			return err
		}
		updated[w] = true
		return nil
	}, keys, steps, tokens, states, results, reasons, nows)
	if err != nil {
		for _, it := range batch {
			go f.finishBatch([]*group.Item[finishCall]{it})
		}
		return
	}
	for _, it := range batch {
		w := row{it.Val.key, it.Val.step, it.Val.token}
		it.Val.done = updated[w]
		delete(updated, w)
		it.Finish(nil)
	}
}

// record inserts a finished effect (DoKeyed's one write), alone or in a batch,
// and reports whether it did (false: the effect exists).
func (f *Fence[Tx]) record(ctx context.Context, key, step, state string, result []byte, reason string, now int64) (bool, error) {
	if f.groups == nil || f.groups.records.Run == nil {
		n, err := f.exec(ctx, f.q.Record, key, step, state, result, reason, now)
		return n == 1, err
	}
	it, err := f.groups.records.Do(ctx, recordCall{key: key, step: step, state: state, result: result, reason: reason, now: now})
	return err == nil && it.Val.recorded, err
}

func (f *Fence[Tx]) recordBatch(batch []*group.Item[recordCall]) {
	f.groups.keyedRTs.Add(1)
	if len(batch) == 1 {
		it, v := batch[0], batch[0].Val
		n, err := f.exec(it.Ctx, f.q.Record, v.key, v.step, v.state, v.result, v.reason, v.now)
		it.Val.recorded = n == 1
		it.Finish(err)
		return
	}
	slices.SortStableFunc(batch, func(a, b *group.Item[recordCall]) int {
		return cmp.Or(cmp.Compare(a.Val.key, b.Val.key), cmp.Compare(a.Val.step, b.Val.step))
	})
	writeBatch(f, batch, f.q.GroupRecord, func(v recordCall) [2]string { return [2]string{v.key, v.step} },
		func(v *recordCall, ok bool) { v.recorded = ok }, f.recordBatch,
		groupRecordArgs(len(batch), func(i int) recordCall { return batch[i].Val })...)
}

// groupRecordArgs are GroupRecord's arrays for n records, the i-th at(i): keys,
// steps, states, results, reasons, nows.
func groupRecordArgs(n int, at func(i int) recordCall) []any {
	keys, steps, states, reasons := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	results, nows := make([][]byte, n), make([]int64, n)
	for i := range n {
		v := at(i)
		keys[i], steps[i], states[i], reasons[i], results[i], nows[i] = v.key, v.step, v.state, v.reason, v.result, v.now
	}
	return []any{keys, steps, states, results, reasons, nows}
}

// lookBatch reads the effects of a batch of DoKeyed callers; one alone reads as
// Get does.
func (f *Fence[Tx]) lookBatch(batch []*group.Item[lookCall]) {
	f.groups.keyedRTs.Add(1)
	if len(batch) == 1 {
		it := batch[0]
		it.Val.e, it.Val.found, it.Err = f.lookOne(it.Ctx, nil, it.Val.key, it.Val.step)
		it.Finish(it.Err)
		return
	}
	var keys, steps []string
	for _, it := range batch {
		keys, steps = append(keys, it.Val.key), append(steps, it.Val.step)
	}
	rows := map[[2]string]Effect{}
	err := runBatch(f, batch, f.q.GroupLook, func(r idemsql.Rows) error {
		var e Effect
		if err := r.Scan(&e.Key, &e.Step, &e.State, &e.Result, &e.Reason); err != nil {
			return err
		}
		rows[[2]string{e.Key, e.Step}] = e
		return nil
	}, keys, steps)
	if err != nil {
		for _, it := range batch {
			go f.lookBatch([]*group.Item[lookCall]{it})
		}
		return
	}
	for _, it := range batch {
		it.Val.e, it.Val.found = rows[[2]string{it.Val.key, it.Val.step}]
		it.Finish(nil)
	}
}

// runBatch runs one batch statement outside any transaction (autocommit), bounded
// by its callers' deadlines, and calls scan for each row it returns.
// writeBatch runs query, a group statement returning the (key, step) of each row it
// wrote, and finishes the batch: wrote sets an item's flag, true for the first item
// of each pair written (a pair twice in one batch is written once, by the first).
// If the statement fails, each item runs again alone on a goroutine of its own, by
// alone.
func writeBatch[Tx, T any](f *Fence[Tx], batch []*group.Item[T], query string, id func(T) [2]string,
	wrote func(*T, bool), alone func([]*group.Item[T]), args ...any) {
	written := map[[2]string]bool{}
	err := runBatch(f, batch, query, func(r idemsql.Rows) error {
		var k [2]string
		if err := r.Scan(&k[0], &k[1]); err != nil {
			return err
		}
		written[k] = true
		return nil
	}, args...)
	if err != nil {
		for _, it := range batch {
			go alone([]*group.Item[T]{it})
		}
		return
	}
	for _, it := range batch {
		k := id(it.Val)
		wrote(&it.Val, written[k])
		delete(written, k)
		it.Finish(nil)
	}
}

func runBatch[Tx, T any](f *Fence[Tx], batch []*group.Item[T], query string, scan func(idemsql.Rows) error, args ...any) error {
	f.groups.batches.Add(1)
	ctx, cancel := group.Context(batch)
	defer cancel()
	return f.db.Read(ctx, func(q idemsql.Querier) error { return idemsql.EachRow(ctx, q, query, args, scan) })
}
