package inbox

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem"
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
	kind string // dead-letter kind: permanent, max_attempts, no_key, key_reused
	fail *failure
}

// errHandler aborts a single-message transaction whose handler failed.
var errHandler = errors.New("inbox: handler failed")

// Process applies one batch of deliveries in one transaction and settles each with
// the broker after the commit. Run calls it; it is exported for consumers that
// receive on their own.
func (c *Consumer[Tx]) Process(ctx context.Context, ds []idem.Delivery) {
	start := time.Now()
	items := make([]item, len(ds))
	for i, d := range ds {
		items[i] = c.prepare(d)
	}
	err := c.db.InTx(ctx, func(tx Tx) error { return c.applyAll(ctx, tx, items) })
	switch {
	case errors.Is(err, errHandler): // one message, whose handler failed: its verdict stands
		if items[0].v == dead {
			c.deadLetterAlone(ctx, &items[0])
		}
	case err != nil: // the store, the database or the commit failed: everything comes again
		for i := range items {
			items[i].v, items[i].err, items[i].kind = retry, fmt.Errorf("transaction rolled back: %w", err), ""
		}
		c.cfg.Logger.Warn("inbox: batch transaction failed; its messages will be redelivered",
			"consumer", c.cfg.Consumer, "messages", len(items), "err", err)
	}
	c.settle(ctx, items)
	c.metrics.Batch(time.Since(start).Seconds())
}

// prepare finds the delivery's key and decides the hopeless cases before any
// transaction: no key, or too many failed attempts already.
func (c *Consumer[Tx]) prepare(d idem.Delivery) item {
	it := item{d: d}
	key, err := c.cfg.Key(d.Message)
	if err == nil {
		err = (idem.Key{Scope: c.cfg.Consumer, ID: key}).Validate()
	}
	if err != nil {
		it.v, it.err, it.kind = dead, fmt.Errorf("no usable key: %w", err), "no_key"
		return it
	}
	it.key = key
	n, f := c.attemptsSoFar(key, d.Attempt)
	if n >= c.cfg.MaxAttempts {
		last := "unknown (counted by the broker)"
		if f != nil {
			last = f.last
		}
		it.v, it.err, it.kind = dead, fmt.Errorf("failed %d attempts (MaxAttempts %d); last error: %s", n, c.cfg.MaxAttempts, last), "max_attempts"
		it.fail = f
	}
	return it
}

// applyAll runs every item in tx. A batch gives each message a savepoint, so a failed
// handler rolls back only its own writes; a single message needs none.
func (c *Consumer[Tx]) applyAll(ctx context.Context, tx Tx, items []item) error {
	q := c.db.Querier(tx)
	batch := len(items) > 1
	for i := range items {
		it := &items[i]
		if it.v == dead {
			if err := c.insertDeadLetter(ctx, q, it); err != nil {
				return err
			}
			continue
		}
		if batch {
			if _, err := q.Exec(ctx, "SAVEPOINT idem_msg"); err != nil {
				return err
			}
		}
		if err := c.apply(ctx, tx, it); err != nil {
			return err // the store or the database failed: the whole batch retries
		}
		if it.v == retry || (it.v == dead && it.kind == "permanent") {
			if !batch {
				return errHandler
			}
			if _, err := q.Exec(ctx, "ROLLBACK TO SAVEPOINT idem_msg"); err != nil {
				return err
			}
			if it.v == dead {
				if err := c.insertDeadLetter(ctx, q, it); err != nil {
					return err
				}
			}
		}
		if batch {
			if _, err := q.Exec(ctx, "RELEASE SAVEPOINT idem_msg"); err != nil {
				return err
			}
		}
	}
	return nil
}

// apply claims the item's key in tx and runs the handler if the key is new. It
// returns an error only for failures of the store; the handler's outcome is on it.
func (c *Consumer[Tx]) apply(ctx context.Context, tx Tx, it *item) error {
	if c.seqOf != nil {
		if producer, epoch, seq, ok := c.seqOf(it.d); ok {
			return c.applySeq(ctx, tx, it, producer, epoch, seq)
		}
	}
	k := idem.Key{Scope: c.cfg.Consumer, ID: it.key}
	sum := sha256.Sum256(it.d.Payload)
	res, err := c.store.ClaimTx(ctx, tx, idem.Claim{Key: k, Fingerprint: sum[:16], Retention: c.cfg.Retention})
	if err != nil {
		return err
	}
	switch res.Outcome {
	case idem.Replayed:
		it.v = duplicate
		return nil
	case idem.InProgress:
		it.v, it.err = retry, fmt.Errorf("key %s is held by another worker outside a transaction", k)
		return nil
	case idem.Mismatch:
		it.v, it.kind = dead, "key_reused"
		it.err = fmt.Errorf("Message.ID %q was already applied with a different payload: the producer reused an id for another message; give each message its own id", it.key)
		return c.insertDeadLetter(ctx, c.db.Querier(tx), it)
	}
	if c.runHandler(ctx, tx, it); it.v != processed {
		return nil
	}
	return c.store.CompleteTx(ctx, tx, k, res.Token, nil)
}

// runHandler runs the handler for it and sets its verdict: processed, retry, or dead
// when the error is permanent.
func (c *Consumer[Tx]) runHandler(ctx context.Context, tx Tx, it *item) {
	err := c.run(ctx, tx, it.d.Message)
	if err == nil {
		it.v = processed
		return
	}
	it.v, it.err = retry, err
	it.fail = c.failed(it.key, it.d.Attempt, err)
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
	if err := c.db.InTx(ctx, func(tx Tx) error { return c.insertDeadLetter(ctx, c.db.Querier(tx), it) }); err != nil {
		it.v, it.err = retry, fmt.Errorf("dead-lettering failed: %w (after: %v)", err, it.err)
	}
}

// settle acknowledges what is done and rejects what must come again. An ack that
// fails is harmless: the redelivery finds the key and is acknowledged as a duplicate.
func (c *Consumer[Tx]) settle(ctx context.Context, items []item) {
	counts := map[verdict]int{}
	for i := range items {
		it := &items[i]
		counts[it.v]++
		var err error
		switch it.v {
		case processed, duplicate, dead:
			if it.v != duplicate && it.key != "" {
				c.forget(it.key)
			}
			if it.v == dead {
				c.metrics.DeadLettered(it.kind)
			}
			err = it.d.Settler.Ack(ctx)
		default:
			attempts := 1
			if it.fail != nil {
				attempts = it.fail.attempts
			}
			err = it.d.Settler.Nak(ctx, c.cfg.Backoff(attempts))
		}
		if err != nil {
			c.cfg.Logger.Warn("inbox: settling a delivery failed; the broker will redeliver it",
				"consumer", c.cfg.Consumer, "id", it.d.ID, "position", it.d.Position, "err", err)
		}
	}
	c.metrics.Settled("processed", counts[processed])
	c.metrics.Settled("duplicate", counts[duplicate])
	c.metrics.Settled("retried", counts[retry])
}
