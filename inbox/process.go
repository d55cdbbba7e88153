package inbox

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/internal/wait"
)

// verdict is what became of one delivery in a batch.
type verdict int

const (
	pending   verdict = iota
	processed         // the effect committed with the key: ack
	duplicate         // the key was already recorded: ack, nothing applied
	retry             // rolled back: nak with backoff
	dead              // dead-lettered in the transaction: ack
)

// item is one delivery on its way through a batch.
type item struct {
	d    idem.Delivery
	key  string
	v    verdict
	err  error  // why it is retried or dead-lettered
	kind string // dead-letter kind: permanent, max_attempts, no_key, key_reused, or a Refused… reason
	fail *failure
	// early: prepare decided the verdict (dead) before any transaction, and a
	// guarded rerun of the batch keeps it; refused: that was a refusal (refuse.go).
	early, refused bool

	claim    idem.Claim   // the key's claim: scope, key, payload fingerprint, retention
	recorded bool         // outcome was answered by the batch's RecordTx
	outcome  idem.Outcome // RecordTx's answer
	owed     bool         // ClaimTx claimed the key: CompleteTx owed after the handler
	token    uint64       // ClaimTx's fencing token, for CompleteTx
	tr       *itemTrace   // nil: nothing to trace or pass on (see tracing.go)
}

// errHandler aborts a single-message transaction whose handler failed, and
// errSavepoints a batch that must run again with a savepoint per message.
var (
	errHandler    = errors.New("inbox: handler failed")
	errSavepoints = errors.New("inbox: a handler failed; running the batch with savepoints")
)

// Process applies one batch of deliveries in one transaction and settles each with
// the broker after the commit. Run calls it; it is exported for consumers that
// receive on their own.
func (c *Consumer[Tx]) Process(ctx context.Context, ds []idem.Delivery) {
	items := c.process(ctx, ds)
	sctx, cancel := settleContext(ctx)
	defer cancel()
	c.settle(sctx, items)
}

// settleContext outlives ctx by a little: acks of committed work are still sent when
// the consumer is stopping, so they are not redelivered as duplicates.
func settleContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
}

// process applies one batch and returns its items with their verdicts, unsettled.
func (c *Consumer[Tx]) process(ctx context.Context, ds []idem.Delivery) []item {
	start := time.Now()
	items := make([]item, len(ds))
	traces := c.traces(ctx, ds, start)
	now := c.cfg.Now()
	for i, d := range ds {
		items[i] = c.prepare(d, now)
		if traces != nil {
			items[i].tr = &traces[i]
		}
	}
	err := c.transact(ctx, items)
	for runs := 1; c.runAgain(ctx, start, runs, len(items), err); runs++ {
		reset(items)
		err = c.transact(ctx, items)
	}
	switch {
	case errors.Is(err, errHandler): // one message, whose handler failed: its verdict stands
		if items[0].v == dead {
			c.deadLetterAlone(ctx, &items[0])
		}
	case err != nil: // the store, the database or the commit failed: everything comes again
		for i := range items {
			items[i].v, items[i].err, items[i].kind = retry, fmt.Errorf("transaction rolled back: %w", err), ""
		}
		c.cfg.Logger.WarnContext(ctx, "inbox: batch transaction failed; its messages will be redelivered",
			"consumer", c.cfg.Consumer, "messages", len(items), "err", err)
	}
	c.metrics.Batch(time.Since(start).Seconds())
	return items
}

// transact runs items in one transaction: the fast path first and, if a handler
// failed in it, the batch again with a savepoint per message.
func (c *Consumer[Tx]) transact(ctx context.Context, items []item) error {
	inTx := c.db.InTx
	if len(items) == 1 { // its first statement records the key: BEGIN rides with it
		inTx = c.db.InTxPipelined
	}
	err := inTx(ctx, func(tx Tx) error { return c.applyAll(ctx, tx, items, false) })
	if errors.Is(err, errSavepoints) { // a handler failed in the fast path: again, guarded
		reset(items)
		err = c.db.InTx(ctx, func(tx Tx) error { return c.applyAll(ctx, tx, items, true) })
	}
	return err
}

// reset clears what a rolled-back run decided, keeping prepare's verdicts.
func reset(items []item) {
	for i := range items {
		if !items[i].early {
			items[i].v, items[i].err, items[i].kind, items[i].recorded = pending, nil, "", false
		}
	}
}

// runAgain reports whether a batch whose transaction failed with err (the database,
// the store or the commit; not a handler) is run again in process, after waiting
// Backoff(runs), rather than handed back to the broker: a connection cut for a
// moment would otherwise redeliver every message of the batch, and the broker
// would redeliver them again each time the next batch met the same outage. The
// messages are still held, and the source is not read meanwhile. It is bounded by
// Config.TxRetryWindow from the batch's start, and ends with ctx. Nothing is lost
// or doubled by it: a commit whose answer was lost finds its keys recorded on the
// next run, and those messages are acknowledged as duplicates.
func (c *Consumer[Tx]) runAgain(ctx context.Context, start time.Time, runs, n int, err error) bool {
	if err == nil || errors.Is(err, errHandler) || ctx.Err() != nil {
		return false
	}
	d := c.cfg.Backoff(runs)
	if time.Since(start)+d > c.cfg.TxRetryWindow {
		return false
	}
	if runs == 1 {
		c.cfg.Logger.WarnContext(ctx, "inbox: batch transaction failed; running it again, its messages held",
			"consumer", c.cfg.Consumer, "messages", n, "err", err)
	}
	return wait.Sleep(ctx, d)
}

// prepare finds the delivery's key and decides the hopeless cases before any
// transaction: no key, a key or deadline it must refuse at now (refusal), or too
// many failed attempts already. Batched and single deliveries all pass here.
func (c *Consumer[Tx]) prepare(d idem.Delivery, now time.Time) item {
	it := item{d: d, early: true}
	key, err := c.cfg.Key(d.Message)
	if err == nil {
		err = (idem.Key{Scope: c.cfg.Consumer, ID: key}).Validate()
	}
	if err != nil {
		it.v, it.err, it.kind = dead, fmt.Errorf("no usable key: %w", err), "no_key"
		return it
	}
	it.key = key
	if kind, err := c.refusal(d, key, now); err != nil {
		it.v, it.err, it.kind, it.refused = dead, err, kind, true
		return it
	}
	sum := sha256.Sum256(d.Payload)
	it.claim = idem.Claim{Key: idem.Key{Scope: c.cfg.Consumer, ID: key}, Fingerprint: sum[:16], Retention: c.cfg.keyRetention()}
	n, f := c.attemptsSoFar(key, d.Attempt)
	if n >= c.cfg.MaxAttempts {
		last := "unknown (counted by the broker)"
		if f != nil {
			last = f.last
		}
		it.v, it.err, it.kind = dead, fmt.Errorf("failed %d attempts (MaxAttempts %d); last error: %s", n, c.cfg.MaxAttempts, last), "max_attempts"
		it.fail = f
	}
	it.early = it.v == dead
	return it
}

// applyAll runs every item in tx, then settles in tx those of a TxSource. A batch first runs without savepoints, the fast
// path; if a handler fails it returns errSavepoints, the transaction rolls back, and
// Process runs the batch again with a savepoint per message (guarded), so the failed
// handler rolls back only its own writes. A single message needs no savepoint.
func (c *Consumer[Tx]) applyAll(ctx context.Context, tx Tx, items []item, guarded bool) error {
	apply := c.applyFast
	if c.batch != nil && len(items) > 1 {
		apply = c.applyBatch
	}
	if guarded {
		apply = c.applyGuarded
	}
	if err := apply(ctx, tx, items); err != nil {
		return err
	}
	return c.settleTx(ctx, tx, items)
}

// applyFast runs items without savepoints: their keys recorded in one statement
// where the store can, then each handler. A failed handler aborts the transaction:
// with errHandler for a single message, whose verdict stands, and with
// errSavepoints for a batch, whose verdicts only a guarded run decides.
func (c *Consumer[Tx]) applyFast(ctx context.Context, tx Tx, items []item) error {
	if err := c.recordAll(ctx, tx, items); err != nil {
		return err
	}
	single := len(items) == 1
	return c.applyEach(ctx, tx, items, func(it *item) error {
		if err := c.apply(ctx, tx, it, single); err != nil {
			return err
		}
		switch {
		case !failedHandler(it):
			return nil
		case single:
			return errHandler
		}
		return errSavepoints
	})
}

// applyGuarded runs each item of a batch in a savepoint of its own; every verdict
// stands.
func (c *Consumer[Tx]) applyGuarded(ctx context.Context, tx Tx, items []item) error {
	return c.applyEach(ctx, tx, items, func(it *item) error { return c.applyInSavepoint(ctx, tx, it) })
}

// applyEach dead-letters the items prepare decided (no key, too many attempts) and
// calls apply for the others, in order. Its first error ends the transaction: a
// failed store or database retries the whole batch.
func (c *Consumer[Tx]) applyEach(ctx context.Context, tx Tx, items []item, apply func(it *item) error) error {
	for i := range items {
		it := &items[i]
		var err error
		if it.v == dead {
			err = c.insertDeadLetter(ctx, c.db.Querier(tx), it)
		} else {
			err = apply(it)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// applyInSavepoint applies it inside a savepoint. A failed handler's writes are
// rolled back to the savepoint; a permanent failure's dead letter is written after
// that rollback, so it stays.
func (c *Consumer[Tx]) applyInSavepoint(ctx context.Context, tx Tx, it *item) error {
	q := c.db.Querier(tx)
	if _, err := q.Exec(ctx, "SAVEPOINT idem_msg"); err != nil {
		return err
	}
	if err := c.apply(ctx, tx, it, true); err != nil {
		return err
	}
	if failedHandler(it) {
		if _, err := q.Exec(ctx, "ROLLBACK TO SAVEPOINT idem_msg"); err != nil {
			return err
		}
		if it.v == dead {
			if err := c.insertDeadLetter(ctx, q, it); err != nil {
				return err
			}
		}
	}
	_, err := q.Exec(ctx, "RELEASE SAVEPOINT idem_msg")
	return err
}

// failedHandler reports whether it's handler failed (and its writes must go).
func failedHandler(it *item) bool {
	return it.v == retry || (it.v == dead && it.kind == "permanent")
}

// apply claims the item's key in tx and runs the handler if the key is new. It
// returns an error only for failures of the store; the handler's outcome is on it.
//
// final says whether this run's verdict stands (a single message, or a guarded batch):
// only then is a handler failure counted towards MaxAttempts.
func (c *Consumer[Tx]) apply(ctx context.Context, tx Tx, it *item, final bool) error {
	fresh, err := c.claim(ctx, tx, it)
	if err != nil || !fresh {
		return err
	}
	c.runHandler(ctx, tx, it, final)
	return c.complete(ctx, tx, it)
}

// claim claims it's key in tx (or checks its sequence number) and reports whether
// the message is fresh: its handler is to run. Otherwise it decides the verdict:
// duplicate, retry (the key is held outside a transaction), or dead, dead-lettered
// in tx (the id reused for another payload, a sequence number too old). It returns
// an error only for failures of the store.
func (c *Consumer[Tx]) claim(ctx context.Context, tx Tx, it *item) (fresh bool, err error) {
	it.owed = false
	if c.seqOf != nil {
		if producer, epoch, seq, ok := c.seqOf(it.d); ok {
			return c.checkSeq(ctx, tx, it, producer, epoch, seq)
		}
	}
	k := it.claim.Key
	var res idem.Result
	switch {
	case it.recorded: // RecordTx answered for the whole batch
		res.Outcome = it.outcome
	case c.recorder != nil:
		out, err := c.record(ctx, tx, []idem.Claim{it.claim}, func(int) *item { return it })
		if err != nil {
			return false, err
		}
		res.Outcome = out[0]
	default:
		// Held by the transaction, not by a lease nobody renews: a handler slower
		// than the default lease must not see CompleteTx refuse its key.
		cl := it.claim
		cl.Lease = max(cl.Lease, cl.Retention)
		if res, err = c.store.ClaimTx(ctx, tx, cl); err != nil {
			return false, err
		}
		it.owed, it.token = res.Outcome == idem.Acquired, res.Token
	}
	switch res.Outcome {
	case idem.Replayed:
		it.v = duplicate
		if it.tr != nil {
			it.tr.applier = otelx.ParseAppliedBy(res.Record.Result)
		}
		return false, nil
	case idem.InProgress:
		it.v, it.err = retry, fmt.Errorf("key %s is held by another worker outside a transaction", k)
		return false, nil
	case idem.Mismatch:
		it.v, it.kind = dead, "key_reused"
		it.err = fmt.Errorf("Message.ID %q was already applied with a different payload: the producer reused an id for another message; give each message its own id", it.key)
		return false, c.insertDeadLetter(ctx, c.db.Querier(tx), it)
	}
	return true, nil
}

// complete completes it's key once its handler succeeded, when its claim left that
// owed (ClaimTx); a key recorded by a TxRecorder is complete already, and a
// sequence number has no key.
func (c *Consumer[Tx]) complete(ctx context.Context, tx Tx, it *item) error {
	if it.v != processed || !it.owed {
		return nil
	}
	return c.store.CompleteTx(ctx, tx, it.claim.Key, it.token, c.appliedBy(it))
}

// record records claims as completed in tx through the store's TxRecorder; item(j)
// is claims[j]'s delivery. While tracing records, each delivery's process span starts
// first and its trace context is recorded as the key's result (when the store can:
// a TxResultRecorder), so a later duplicate's span can link to the delivery that
// applied the message.
func (c *Consumer[Tx]) record(ctx context.Context, tx Tx, claims []idem.Claim, item func(j int) *item) ([]idem.Outcome, error) {
	if c.results == nil || c.tr.Off() {
		return c.recorder.RecordTx(ctx, tx, claims)
	}
	var results [][]byte
	for j := range claims {
		it := item(j)
		if it.tr == nil || it.tr.opts == nil {
			continue
		}
		c.startProcess(ctx, it)
		if b := c.appliedBy(it); b != nil {
			if results == nil {
				results = make([][]byte, len(claims))
			}
			results[j] = b
		}
	}
	return c.results.RecordResultsTx(ctx, tx, claims, results)
}

// appliedBy is what the store records as the result of it's key: the trace context
// of its process span, or nil when nothing traces it.
func (c *Consumer[Tx]) appliedBy(it *item) []byte {
	if it.tr == nil || it.tr.span == nil {
		return nil
	}
	return otelx.AppliedBy(it.tr.span.SpanContext())
}

// settleParallelism bounds the concurrent acks of one batch.
const settleParallelism = 16

func (c *Consumer[Tx]) settleOne(ctx context.Context, it *item) {
	var err error
	if it.v == retry || it.v == pending { // pending would be a bug: redeliver, never ack
		attempts := 1
		if it.fail != nil {
			attempts = it.fail.attempts
		}
		err = it.d.Settler.Nak(ctx, c.cfg.Backoff(attempts))
	} else {
		err = it.d.Settler.Ack(ctx)
	}
	if err != nil {
		c.cfg.Logger.WarnContext(ctx, "inbox: settling a delivery failed; the broker will redeliver it",
			"consumer", c.cfg.Consumer, "id", it.d.ID, "position", it.d.Position, "err", err)
	}
	c.endSpan(ctx, it, err)
}

// recordAll records the keys of a batch's pending items in one statement, when the
// store can: the fast path's one round trip for all claims. Its outcomes hold because
// the fast path commits or rolls back the batch as a whole.
func (c *Consumer[Tx]) recordAll(ctx context.Context, tx Tx, items []item) error {
	if c.recorder == nil {
		return nil
	}
	var claims []idem.Claim
	var idx []int
	for i := range items {
		if items[i].v == pending && !c.bySequence(items[i].d) {
			claims, idx = append(claims, items[i].claim), append(idx, i)
		}
	}
	if len(claims) < 2 {
		return nil
	}
	out, err := c.record(ctx, tx, claims, func(j int) *item { return &items[idx[j]] })
	if err != nil {
		return err
	}
	for j, i := range idx {
		items[i].recorded, items[i].outcome = true, out[j]
	}
	return nil
}

func (c *Consumer[Tx]) bySequence(d idem.Delivery) bool {
	if c.seqOf == nil {
		return false
	}
	_, _, _, ok := c.seqOf(d)
	return ok
}

// runHandler runs the handler for it and sets its verdict: processed, retry, or dead
// when the error is permanent.
//
// The handler's context carries the message's key lineage (idem.WithKey), derived
// from its key and the consumer, so the handler's calls through an
// idemhttp.Transport carry the same keys on every redelivery.
func (c *Consumer[Tx]) runHandler(ctx context.Context, tx Tx, it *item, final bool) {
	key, consumer := it.key, c.cfg.Consumer
	ctx, span := c.startApply(ctx, it)
	err := c.run(idem.WithKeyFunc(ctx, func() string { return idemkey.Derive(key, consumer) }), tx, it.d.Message)
	otelx.Fail(span, err)
	span.End()
	if err == nil {
		it.v = processed
		return
	}
	it.v, it.err = retry, err
	if final {
		it.fail = c.failed(it.key, it.d.Attempt, err)
	}
	if IsPermanent(err) {
		it.v, it.kind = dead, "permanent"
	}
}

// run calls the handler, turning a panic into an error so one bad message cannot
// crash the consumer (it is retried, then dead-lettered).
func (c *Consumer[Tx]) run(ctx context.Context, tx Tx, m idem.Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return c.handle(ctx, tx, m)
}

// deadLetterAlone writes the dead letter of a single message whose handler failed
// permanently, after its transaction rolled back.
func (c *Consumer[Tx]) deadLetterAlone(ctx context.Context, it *item) {
	it.v = dead
	err := c.db.InTx(ctx, func(tx Tx) error {
		if err := c.insertDeadLetter(ctx, c.db.Querier(tx), it); err != nil {
			return err
		}
		return c.settleTx(ctx, tx, []item{*it})
	})
	if err != nil {
		it.v, it.err = retry, fmt.Errorf("dead-lettering failed: %w (after: %v)", err, it.err)
	}
}

// settle acknowledges what is done and rejects what must come again. An ack that
// fails is harmless: the redelivery finds the key and is acknowledged as a duplicate.
// A batch's deliveries are settled concurrently (up to settleParallelism at once):
// with a broker that confirms each ack (JetStream's double ack) the round trips would
// otherwise add up to more than the batch's transaction.
func (c *Consumer[Tx]) settle(ctx context.Context, items []item) {
	counts := map[verdict]int{}
	for i := range items {
		it := &items[i]
		counts[it.v]++
		if it.v != retry && it.v != duplicate && it.key != "" {
			c.forget(it.key)
		}
		if it.v == dead {
			c.metrics.DeadLettered(it.kind)
			if it.refused {
				c.metrics.Refused(it.kind)
			}
		}
	}
	if len(items) == 1 {
		c.settleOne(ctx, &items[0])
	} else {
		sem := make(chan struct{}, settleParallelism)
		var wg sync.WaitGroup
		for i := range items {
			sem <- struct{}{}
			wg.Add(1)
			go func(it *item) {
				defer func() { <-sem; wg.Done() }()
				c.settleOne(ctx, it)
			}(&items[i])
		}
		wg.Wait()
	}
	c.metrics.Settled("processed", counts[processed])
	c.metrics.Settled("duplicate", counts[duplicate])
	c.metrics.Settled("retried", counts[retry])
	if counts[dead] > 0 {
		c.deadLettersChanged()
	}
}
