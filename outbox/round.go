package outbox

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/internal/sqltext"
	"github.com/idemhq/idem/internal/wait"
)

// partitionsPerRound is how many ordering partitions a relay takes per round: a
// quarter, so up to four relays work side by side on a backlog.
const partitionsPerRound = Partitions / 4

// strayPart stands, among the partitions of a round that takes them with LockParts,
// for the rows whose part is out of range (ClaimStrays).
const strayPart = -1

// lockPartitions locks up to partitionsPerRound partitions with due rows, in one
// statement (LockPartitions).
func (r *Relay[Tx]) lockPartitions(ctx context.Context, q idemsql.Querier) ([]int32, error) {
	return queryInts(ctx, q, r.o.stmts.LockPartitions, r.o.now().UnixMilli(), partitionsPerRound)
}

func (r *Relay[Tx]) claim(ctx context.Context, q idemsql.Querier, query string, extra ...any) ([]row, error) {
	return r.claimLimit(ctx, q, query, r.batchSize(), extra...)
}

// claimLimit is claim with a limit of its own. Each row is decoded on its own
// (scanRow): one that cannot be is returned with its error, for publish to record.
func (r *Relay[Tx]) claimLimit(ctx context.Context, q idemsql.Querier, query string, limit int, extra ...any) ([]row, error) {
	return idemsql.Collect(ctx, q, query, append([]any{r.o.now().UnixMilli(), limit}, extra...), scanRow)
}

// publish sends rows to the sink and records the outcome in q. A row that could not
// be decoded is not sent: it fails alone (failBad). When the batch fails it is sent
// again one message at a time, so one bad message costs only its own attempt:
// messages that go through are marked published; the first failure of an ordering
// key records an attempt (with backoff, parked at MaxAttempts) and holds back the
// rest of that key in the batch, untouched, so nothing overtakes it. When the
// sink's error says which messages the broker accepted (idem.PublishError), those
// are marked published as they are and only the others are sent again; an accepted
// message behind a refused one of its key is already at the broker, so holding it
// back could not restore the order.
func (r *Relay[Tx]) publish(ctx context.Context, q idemsql.Querier, rows []row) (int, error) {
	rows, err := r.failBad(ctx, q, rows)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	return r.settle(ctx, q, rows, r.send(ctx, messages(rows)))
}

// failBad records a failed attempt of each row that could not be decoded, as for a
// message the broker refused (its decode error as the reason, parked at
// MaxAttempts), and returns the other rows, less those that follow a bad one of
// their ordering key: they wait, untouched, as behind any failed message.
func (r *Relay[Tx]) failBad(ctx context.Context, q idemsql.Querier, rows []row) ([]row, error) {
	if !slices.ContainsFunc(rows, func(w row) bool { return w.bad != nil }) {
		return rows, nil
	}
	good := make([]row, 0, len(rows))
	held := map[string]bool{}
	for _, w := range rows {
		switch {
		case w.msg.OrderingKey != "" && held[w.msg.OrderingKey]:
		case w.bad != nil:
			held[w.msg.OrderingKey] = w.msg.OrderingKey != ""
			r.m.Failed(1)
			if err := r.markFailed(ctx, q, w, w.bad); err != nil {
				return nil, err
			}
		default:
			good = append(good, w)
		}
	}
	return good, nil
}

// messages returns the messages of rows.
func messages(rows []row) []idem.Message {
	msgs := make([]idem.Message, len(rows))
	for i, w := range rows {
		msgs[i] = w.msg
	}
	return msgs
}

// settle records the outcome of sending rows as one batch: perr is the batch's
// error. See publish.
func (r *Relay[Tx]) settle(ctx context.Context, q idemsql.Querier, rows []row, perr error) (int, error) {
	if perr == nil {
		return len(rows), r.markPublished(ctx, q, rows)
	}
	if ctx.Err() != nil {
		return 0, perr // shutting down: nothing is recorded, the rows come again
	}
	var ok []row
	if acc := accepted(perr, len(rows)); acc != nil {
		// The broker acknowledged part of the batch: those rows are published, and
		// only the others are tried again, one at a time.
		rest := make([]row, 0, len(rows))
		for i, w := range rows {
			if acc[i] {
				ok = append(ok, w)
			} else {
				rest = append(rest, w)
			}
		}
		rows = rest
	} else if len(rows) == 1 {
		return 0, r.markFailed(ctx, q, rows[0], perr)
	}
	held := map[string]bool{}
	for _, w := range rows {
		if w.msg.OrderingKey != "" && held[w.msg.OrderingKey] {
			continue
		}
		err := r.send(ctx, []idem.Message{w.msg})
		if ctx.Err() != nil {
			return 0, err
		}
		if err == nil {
			ok = append(ok, w)
			continue
		}
		held[w.msg.OrderingKey] = w.msg.OrderingKey != ""
		if err := r.markFailed(ctx, q, w, err); err != nil {
			return 0, err
		}
	}
	if len(ok) == 0 {
		return 0, nil
	}
	return len(ok), r.markPublished(ctx, q, ok)
}

// accepted returns which of the n messages a failed publish says the broker
// acknowledged (idem.PublishError), or nil when it does not say.
func accepted(err error, n int) []bool {
	var pe *idem.PublishError
	if errors.As(err, &pe) && len(pe.Accepted) == n {
		return pe.Accepted
	}
	return nil
}

// send publishes msgs and records the call: its duration and, if it failed, how many
// messages it failed.
//
// Each message gets a producer span, a child of the trace context stored in its
// headers by EnqueueTx, and is sent with that span's context in place of the stored
// one: a message published again (after a failure, or by a relay that died before
// marking it) is a new span of the same trace.
func (r *Relay[Tx]) send(ctx context.Context, msgs []idem.Message) error {
	var spans []trace.Span
	if !r.tr.Off() { // else the stored headers are sent as they are
		spans = make([]trace.Span, len(msgs))
	}
	for i := range spans {
		m := &msgs[i]
		var sctx context.Context
		sctx, spans[i] = r.tr.Start(r.tr.Extract(ctx, m.Headers), otelx.SpanRelayPublish, otelx.KindProducer...)
		m.Headers = r.tr.Inject(sctx, m.Headers)
		if spans[i].IsRecording() {
			otelx.MessageAttrs(spans[i], r.sys, "send", *m, "")
			spans[i].SetAttributes(otelx.KeyOutboxPartition.Int(partition(*m)))
		}
	}
	start := time.Now()
	err := r.sink.Publish(ctx, msgs...)
	failed := 0
	if err != nil {
		failed = len(msgs)
		for _, ok := range accepted(err, len(msgs)) {
			if ok {
				failed--
			}
		}
	}
	r.m.Publish(time.Since(start).Seconds(), failed)
	for _, s := range spans {
		otelx.Fail(s, err)
		s.End()
	}
	return err
}

// sentRows are the rows the broker acknowledged in one round, noted by
// markPublished before it marks them (under sentKey in the round's context).
type sentRows struct{ rows []row }

type sentKey struct{}

// noteSent notes rows in the round's sentRows, if ctx is a round's.
func noteSent(ctx context.Context, rows []row) {
	if s, ok := ctx.Value(sentKey{}).(*sentRows); ok {
		s.rows = append(s.rows, rows...)
	}
}

// maxRemark bounds how long remark tries to mark a failed round's rows.
const maxRemark = 5 * time.Second

// remark marks rows, which the broker acknowledged in a round whose transaction
// then failed (err: a connection cut, a failover), published in transactions of
// their own, trying again with backoff for up to maxRemark while the database is
// unreachable. Without it the next round would publish them all again: up to
// BatchSize × RoundBatches copies for one cut, each delivered again by a broker
// that keeps every copy (Kafka, Redis Streams, Pub/Sub). Marking a row the broker
// acknowledged is right whoever else publishes it meanwhile. It returns how many
// rows it marked; a relay killed meanwhile (ctx) marks none, and those rows are
// published again, as before.
func (r *Relay[Tx]) remark(ctx context.Context, rows []row, err error) int {
	start := time.Now()
	for failures := 1; ctx.Err() == nil; failures++ {
		merr := r.o.db.InTx(ctx, func(tx Tx) error { return r.markPublished(ctx, r.o.db.Querier(tx), rows) })
		if merr == nil {
			r.cfg.Logger.InfoContext(ctx, "outbox relay: a failed round's published messages were marked in a transaction of their own",
				"messages", len(rows), "round_err", err)
			return len(rows)
		}
		d := roundBackoff(failures, r.cfg.PollInterval)
		if time.Since(start)+d > maxRemark || !wait.Sleep(ctx, d) {
			break
		}
	}
	return 0
}

func (r *Relay[Tx]) markPublished(ctx context.Context, q idemsql.Querier, rows []row) error {
	if len(rows) == 0 {
		return nil
	}
	noteSent(ctx, rows)
	now := r.o.now().UnixMilli()
	var err error
	if r.o.stmts.MarkPublishedArray != "" {
		ids := make([]int64, len(rows))
		for i, w := range rows {
			ids[i] = w.id
		}
		_, err = q.Exec(ctx, r.o.stmts.MarkPublishedArray, now, ids)
	} else {
		args := make([]any, 1+len(rows))
		args[0] = now
		for i, w := range rows {
			args[1+i] = w.id
		}
		_, err = q.Exec(ctx, r.o.stmts.MarkPublished(len(rows)), args...)
	}
	if err != nil {
		return err
	}
	lags := make([]float64, len(rows))
	for i, w := range rows {
		lags[i] = float64(now-w.created) / 1000
	}
	r.m.Published(lags)
	r.failing.OK(ctx)
	return nil
}

// markFailed records a failed attempt of w: its error, a backoff, and parking at
// MaxAttempts. A parked message is always logged; the retries of a series of
// failures with no publication between them are collapsed (package warn), so that
// a broker outage does not log every message of the backlog at every attempt.
func (r *Relay[Tx]) markFailed(ctx context.Context, q idemsql.Querier, w row, perr error) error {
	now := r.o.now().UnixMilli()
	attempts := w.attempts + 1
	var parked *int64
	if attempts >= r.cfg.MaxAttempts {
		parked = &now
	}
	_, err := q.Exec(ctx, r.o.stmts.MarkFailed, attempts, lastError(perr), now+r.cfg.Backoff(attempts).Milliseconds(), parked, w.id)
	switch {
	case err != nil:
	case parked != nil:
		r.cfg.Logger.WarnContext(ctx, "outbox relay: message parked after its last attempt: it waits for Retry (idem outbox retry)",
			"row", w.id, "id", w.msg.ID, "attempts", attempts, "err", perr)
	default:
		r.failing.Fail(ctx, perr, "row", w.id, "id", w.msg.ID, "attempt", attempts)
	}
	return err
}

// lastError is err's text as the last_error column keeps it: valid UTF-8 without
// NUL (PostgreSQL refuses both in TEXT, which would fail the round that records it)
// and at most 4 KiB, whatever a broker or a receiver put in it.
func lastError(err error) string {
	return sqltext.Fit(err.Error(), 4096)
}

// lockParts locks up to partitionsPerRound partitions with due rows, skipping
// those other relays hold (DueParts, then LockParts). It starts at a random
// partition, so that relays spread over a backlog, and wraps around. When rows
// with a part out of range wait, strayPart comes last, unlocked: no lock covers
// them.
func (r *Relay[Tx]) lockParts(ctx context.Context, q idemsql.Querier) ([]int32, error) {
	due, err := queryInts(ctx, q, r.o.stmts.DueParts)
	if err != nil || len(due) == 0 {
		return nil, err
	}
	var strays []int32
	if i := slices.Index(due, strayPart); i >= 0 {
		due, strays = slices.Delete(due, i, i+1), []int32{strayPart}
	}
	start := rand.Int32N(Partitions)
	var later, earlier []int32
	for _, p := range due {
		if p >= start {
			later = append(later, p)
		} else {
			earlier = append(earlier, p)
		}
	}
	var held []int32
	for _, cands := range [][]int32{later, earlier} {
		if len(cands) == 0 || len(held) == partitionsPerRound {
			continue
		}
		args := make([]any, len(cands))
		for i, p := range cands {
			args[i] = p
		}
		got, err := queryInts(ctx, q, r.o.stmts.LockParts(len(cands), partitionsPerRound-len(held)), args...)
		if err != nil {
			return nil, err
		}
		held = append(held, got...)
	}
	return append(held, strays...), nil
}

// queryInts runs query and returns its first column's values.
func queryInts(ctx context.Context, q idemsql.Querier, query string, args ...any) ([]int32, error) {
	return idemsql.Collect(ctx, q, query, args, func(rs idemsql.Rows) (v int32, err error) {
		return v, rs.Scan(&v)
	})
}
