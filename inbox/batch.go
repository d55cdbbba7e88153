package inbox

import (
	"bytes"
	"context"
	"fmt"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/otelx"
)

// BatchHandler applies the effects of several messages at once inside tx, the
// transaction in which their keys are recorded, so that it can write them in one
// statement (a multi-row INSERT, INSERT … SELECT FROM unnest, pgx CopyFrom) rather
// than one per message. It may assume that ms are only messages whose keys are new
// (no duplicates, nothing dead-lettered), in delivery order, and non-empty.
//
// It must do all its writes through tx and keep no state across calls: after a
// failure the same messages come again, in smaller calls. A nil error commits every
// message's effect with its key. An error rolls the whole transaction back and the
// batch runs again with one message per call, each under a savepoint, so that only
// the failing message is retried, or dead-lettered when its error is Permanent.
type BatchHandler[Tx any] func(ctx context.Context, tx Tx, ms []idem.Message) error

// NewBatch returns a consumer like New's whose handler sees the fresh messages of
// a batch (Config.BatchSize) at once. Everything else is New's: Run, Process, dead
// letters and their replays, metrics, spans, a TxSource settled in the transaction.
//
// handle is called once per batch with the messages whose keys were new, unless
// none were. A message processed alone (BatchSize 1, WithLSN, a replay, or the
// run after a failure) is a call with one message, whose context carries its key
// lineage (idem.KeyFrom) and its idem.inbox.apply span, as New's handler's does; a
// call with several carries neither, since no one message owns it (each message
// still gets its own idem.inbox.apply span, ending when the call returns).
// Messages deduplicated by sequence number (WithSequences) join the call like the
// others.
func NewBatch[Tx any](ctx context.Context, src idem.Source, db idemsql.TxDB[Tx], store idem.TxStore[Tx], handle BatchHandler[Tx], cfg Config,
	opts ...Option[Tx]) (*Consumer[Tx], error) {
	if handle == nil {
		return nil, &idem.InputError{Field: "handle", Reason: "is nil", Fix: "pass the function that applies a batch of messages"}
	}
	one := func(ctx context.Context, tx Tx, m idem.Message) error { return handle(ctx, tx, []idem.Message{m}) }
	c, err := New(ctx, src, db, store, one, cfg, opts...)
	if err != nil {
		return nil, err
	}
	c.batch = handle
	return c, nil
}

// applyBatch is the fast path of a BatchHandler: every key claimed first (in one
// statement where the store can), then the handler called once with the fresh
// messages, then the keys the claims left owed completed. A failed handler aborts
// the transaction with errSavepoints: the guarded run calls it again with one
// message at a time, each under a savepoint, and decides each verdict.
func (c *Consumer[Tx]) applyBatch(ctx context.Context, tx Tx, items []item) error {
	if err := c.recordAll(ctx, tx, items); err != nil {
		return err
	}
	var fresh []*item
	var claimed map[string][]byte // fingerprints of the keys ClaimTx claimed (not yet complete)
	err := c.applyEach(ctx, tx, items, func(it *item) error {
		// A message twice in one batch is a duplicate of its first copy, which
		// commits with it or not at all; ClaimTx would find the key held, not
		// applied, and have it redelivered.
		if fp, ok := claimed[it.key]; ok && bytes.Equal(fp, it.claim.Fingerprint) {
			it.v = duplicate
			return nil
		}
		ok, err := c.claim(ctx, tx, it)
		if ok {
			fresh = append(fresh, it)
		}
		if ok && it.owed {
			if claimed == nil {
				claimed = map[string][]byte{}
			}
			claimed[it.key] = it.claim.Fingerprint
		}
		return err
	})
	if err != nil || len(fresh) == 0 {
		return err
	}
	if !c.runBatch(ctx, tx, fresh) {
		return errSavepoints
	}
	for _, it := range fresh {
		if err := c.complete(ctx, tx, it); err != nil {
			return err
		}
	}
	return nil
}

// runBatch calls the batch handler once with fresh's messages and, if it succeeds,
// sets each processed. It reports whether it succeeded. A failure is not counted
// towards MaxAttempts: the guarded run finds which message failed.
func (c *Consumer[Tx]) runBatch(ctx context.Context, tx Tx, fresh []*item) bool {
	if len(fresh) == 1 { // the call New's handler would get: key lineage and span in ctx
		c.runHandler(ctx, tx, fresh[0], false)
		return fresh[0].v == processed
	}
	ms := make([]idem.Message, len(fresh))
	var spans []trace.Span
	for i, it := range fresh {
		ms[i] = it.d.Message
		if _, span := c.startApply(ctx, it); span != otelx.NoSpan {
			spans = append(spans, span)
		}
	}
	err := c.runAll(ctx, tx, ms)
	for _, span := range spans {
		otelx.Fail(span, err)
		span.End()
	}
	if err != nil {
		return false
	}
	for _, it := range fresh {
		it.v = processed
	}
	return true
}

// runAll calls the batch handler, turning a panic into an error as run does.
func (c *Consumer[Tx]) runAll(ctx context.Context, tx Tx, ms []idem.Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return c.batch(ctx, tx, ms)
}
