package outbox

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/metrics"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/internal/wait"
	"github.com/idemhq/idem/internal/warn"
)

// Notifier wakes a relay when messages were committed: idempg.NewNotifier listens for
// the NOTIFY that EnqueueTx sends on PostgreSQL. Wait returns when a notification
// arrives, or with an error when the listening connection failed (the relay then
// polls and calls Wait again). A Notifier that also has Listen(ctx) error (as
// idempg.Notifier does), listening at once, is listened to again with it after a
// failure, and the relay runs a round as soon as it listens again: what committed
// while nobody listened notified nobody.
type Notifier interface {
	Wait(ctx context.Context) error
}

// MinPollInterval is the shortest wait of a relay's polling: the one after a round
// that published, or after a wake.
const MinPollInterval = 10 * time.Millisecond

// RelayConfig configures a Relay. The zero value is usable.
type RelayConfig struct {
	// BatchSize is how many messages one batch holds: one Sink.Publish call, and
	// one read and one mark in the database. Default 100.
	BatchSize int
	// RoundBatches is how many batches one round may publish on PostgreSQL, back to
	// back in one transaction that holds the round's partitions: each batch is
	// published while the previous one is marked and the next one read, so the
	// database's work hides behind the broker's. A round ends early when a read
	// finds fewer than BatchSize messages or a publication fails. Marks commit at
	// the end of the round: a relay killed mid-round leaves its batches unmarked, to
	// be published again (and deduplicated) as after any crash. MySQL and SQLite
	// publish one batch a round. Default 8.
	RoundBatches int
	// PollInterval is the longest the relay waits without being woken. It polls
	// adaptively: MinPollInterval after a round that published or a wake, doubling
	// while rounds find nothing, up to PollInterval. Without a Notifier (MySQL, or
	// producers in other processes on SQLite) under steady traffic a message then
	// waits at most about MinPollInterval, and the first one after a quiet spell up
	// to PollInterval. With one, the wake comes at commit; the quick rounds after it
	// find the messages of transactions that did not notify (Config.NotifyEvery).
	// Default 1 s.
	PollInterval time.Duration
	// MaxAttempts is how many failed publications park a message; a row that cannot
	// be decoded fails each attempt. Default 10.
	MaxAttempts int
	// Backoff returns the delay before the attempt-th retry. Default: 200 ms doubling,
	// capped at 1 minute, ±20% jitter.
	Backoff func(attempt int) time.Duration
	// Retention is how long published messages are kept before cleanup. Default 7 days.
	Retention time.Duration
	// CleanupInterval is how often published messages past Retention are deleted, in
	// batches of CleanupBatch (default every minute, 1,000 rows a batch).
	CleanupInterval time.Duration
	CleanupBatch    int
	// Notifier wakes the relay on commit (PostgreSQL: idempg.NewNotifier). Without it
	// the relay polls, and is woken in-process by EnqueueTx of the same Outbox.
	Notifier Notifier
	// Registerer receives idem_outbox_unpublished, idem_outbox_oldest_age_seconds,
	// idem_outbox_parked, idem_relay_published_total, idem_relay_failures_total,
	// idem_relay_round_failures_total, idem_relay_publish_duration_seconds and
	// idem_relay_lag_seconds.
	Registerer prometheus.Registerer
	// Logger receives failed rounds and publications at warn level, a series of
	// repeats collapsed into a few lines (the 1st, 8th, 16th…), and parked messages.
	// Default slog.Default().
	Logger *slog.Logger
	// Instance names this relay in idem_outbox_relays, where it reports its rounds
	// (at most once a second) for Admin.Status. Default host-pid-random; at most 255
	// bytes.
	Instance string
	// TracerProvider makes a producer span (idem.outbox.publish) per message
	// published, a child of the trace context EnqueueTx stored in the message's
	// headers; nil means the global one (otel.GetTracerProvider). Propagator reads
	// that stored context and writes the publish span's into the headers sent to the
	// broker; nil means the global one (otel.GetTextMapPropagator).
	TracerProvider trace.TracerProvider
	Propagator     propagation.TextMapPropagator
}

func (c RelayConfig) withDefaults() (RelayConfig, error) {
	c.BatchSize = cmp.Or(c.BatchSize, 100)
	c.RoundBatches = cmp.Or(c.RoundBatches, 8)
	c.PollInterval = cmp.Or(c.PollInterval, time.Second)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, 10)
	c.Retention = cmp.Or(c.Retention, 7*24*time.Hour)
	c.CleanupInterval = cmp.Or(c.CleanupInterval, time.Minute)
	c.CleanupBatch = cmp.Or(c.CleanupBatch, 1000)
	if c.Backoff == nil {
		c.Backoff = func(n int) time.Duration {
			d := min(200*time.Millisecond<<min(max(n-1, 0), 10), time.Minute)
			return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.BatchSize < 1 || c.BatchSize > 10_000:
		return c, &idem.InputError{Field: "RelayConfig.BatchSize", Reason: fmt.Sprintf("must be 1 to 10000 (got %d)", c.BatchSize), Fix: "leave it 0 for 100"}
	case c.RoundBatches < 1 || c.RoundBatches > 1000:
		return c, &idem.InputError{Field: "RelayConfig.RoundBatches", Reason: fmt.Sprintf("must be 1 to 1000 (got %d)", c.RoundBatches), Fix: "leave it 0 for 8; 1 publishes one batch a round"}
	case c.MaxAttempts < 1:
		return c, &idem.InputError{Field: "RelayConfig.MaxAttempts", Reason: fmt.Sprintf("must be at least 1 (got %d)", c.MaxAttempts), Fix: "leave it 0 for 10"}
	case len(c.Instance) > 255:
		return c, &idem.InputError{Field: "RelayConfig.Instance", Reason: fmt.Sprintf("is longer than 255 bytes (got %d)", len(c.Instance)),
			Fix: "use a short name, e.g. the pod name; leave it empty for host-pid-random"}
	case c.PollInterval < 0 || c.Retention < 0 || c.CleanupInterval < 0 || c.CleanupBatch < 0:
		return c, &idem.InputError{Field: "RelayConfig", Reason: "has a negative interval or batch", Fix: "leave fields 0 for their defaults"}
	}
	return c, nil
}

// Relay publishes the outbox's messages to a Sink and marks them published. Several
// relays may run on one PostgreSQL database: each round takes some ordering
// partitions with advisory locks and then locks their due rows, so no row is
// published by two relays at once and one ordering key's messages are published in
// order. On SQLite run one relay per database file.
//
// A relay killed after publishing and before marking leaves the rows unmarked: they
// are published again, with the same ID, and the broker's dedup (JetStream) or the
// consumer's inbox absorbs the copy.
type Relay[Tx any] struct {
	o    *Outbox[Tx]
	sink idem.Sink
	cfg  RelayConfig
	m    *metrics.Relay
	inst *instance
	tr   otelx.Tracer
	sys  string // the sink's messaging.system, "" if it does not say

	// The warnings of failures that repeat, collapsed (package warn): rounds,
	// listening, recording the instance, and the messages' failed attempts.
	rounds, listening, beats, failing *warn.Repeats
	idleAt                            atomic.Int64 // Unix ms when Stall last found nothing waiting
	// probe is the most messages a round of Run reads after a failed round: 1 after
	// the failure, doubling with each round that commits, 0 (cfg.BatchSize) once it
	// reaches BatchSize again. See batchSize.
	probe atomic.Int64
	// minPoll is the shortest poll wait, MinPollInterval; tests lengthen it so that
	// only a wake runs a round.
	minPoll time.Duration
}

// Relay returns a relay of o's messages to sink.
func (o *Outbox[Tx]) Relay(sink idem.Sink, cfg RelayConfig) (*Relay[Tx], error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if sink == nil {
		return nil, &idem.InputError{Field: "sink", Reason: "is nil", Fix: "pass a broker Sink (idemnats, idemkafka, idemredis, idemamqp) or a webhook"}
	}
	log := cfg.Logger
	r := &Relay[Tx]{o: o, sink: sink, cfg: cfg, inst: newInstance(cfg.Instance),
		tr: otelx.New(cfg.TracerProvider, cfg.Propagator), sys: otelx.System(sink),
		rounds:    warn.New(log, "outbox relay: round failed", "outbox relay: rounds succeed again"),
		listening: warn.New(log, "outbox relay: listening failed; polling meanwhile", "outbox relay: listening again"),
		beats:     warn.New(log, "outbox relay: recording the relay instance failed", "outbox relay: recording the relay instance again"),
		failing:   warn.New(log, "outbox relay: publish failed; will retry", "outbox relay: publications succeed again")}
	if r.m, err = metrics.NewRelay(cfg.Registerer, r.backlog); err != nil {
		return nil, err
	}
	return r, nil
}

// Run relays until ctx ends and returns ctx's error. Failed rounds are retried with
// backoff, 50 ms doubling up to 5 s (or PollInterval when longer); they never end
// Run, and a series of them logs a few lines, not one each (package warn). After a
// failed round, which may have published what it could not mark, rounds read one
// message, then twice as many after each round that commits, up to BatchSize: a
// database that keeps refusing (a full disk) costs one doubled message a round,
// not a whole round of doubles. When ctx
// ends, Run removes this relay's row from idem_outbox_relays: a relay stopped
// cleanly is no longer listed.
func (r *Relay[Tx]) Run(ctx context.Context) error {
	defer r.deregister(ctx)
	wake := make(chan struct{}, 1)
	if r.cfg.Notifier != nil {
		// LISTEN before the first round, so no commit falls between that round and it.
		listened := true
		if l, ok := r.cfg.Notifier.(listener); ok {
			if err := l.Listen(ctx); err != nil && ctx.Err() == nil {
				r.listening.Fail(ctx, err)
				listened = false
			}
		}
		go r.listen(ctx, wake, listened)
	}
	attentive := min(cmp.Or(r.minPoll, MinPollInterval), r.cfg.PollInterval)
	idle := attentive // the wait before the next unprompted round: attentive at first, backing off while idle
	poll := time.NewTimer(idle)
	defer poll.Stop()
	cleanup := time.NewTicker(r.cfg.CleanupInterval)
	defer cleanup.Stop()
	quick := 0 // rounds left of quick rechecks after an in-process wake (the tx may not have committed yet)
	for {
		n, err := r.RunOnce(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			// Back off, whatever wakes the relay.
			r.rounds.Fail(ctx, err)
			r.probe.Store(1)
			if !wait.Sleep(ctx, roundBackoff(r.rounds.Failing(), r.cfg.PollInterval)) {
				return ctx.Err()
			}
			continue
		}
		r.rounds.OK(ctx)
		if p := r.probe.Load(); p > 0 {
			if p *= 2; p >= int64(r.cfg.BatchSize) {
				p = 0
			}
			r.probe.Store(p)
		}
		if n > 0 {
			idle = attentive
			continue // more may be waiting, in partitions this round did not take
		}
		poll.Reset(idle)
		idle = min(2*idle, r.cfg.PollInterval)
		var recheck <-chan time.Time
		if quick > 0 {
			recheck = time.After(time.Duration(4-quick) * 5 * time.Millisecond)
			quick--
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
			idle = attentive // transactions that did not notify may commit around this one
		case <-r.o.wake:
			quick = 3
		case <-recheck:
		case <-poll.C:
		case <-cleanup.C:
			if _, err := r.Cleanup(ctx); err != nil && ctx.Err() == nil {
				r.cfg.Logger.WarnContext(ctx, "outbox relay: cleanup failed", "err", err)
			}
		}
	}
}

// maxRoundBackoff bounds the wait after a failed round (or a failed LISTEN), unless
// the poll interval is longer: a relay retries a database it cannot reach every 5 s
// at most, and finds it again within 5 s of its return.
const maxRoundBackoff = 5 * time.Second

// roundBackoff is the wait after the failures-th failure in a row: 50 ms doubling.
func roundBackoff(failures int, poll time.Duration) time.Duration {
	return min(50*time.Millisecond<<min(max(failures-1, 0), 7), max(poll, maxRoundBackoff))
}

// listener is a Notifier that can listen without waiting (idempg.Notifier).
type listener interface{ Listen(context.Context) error }

// listen turns the Notifier's notifications into wakes until ctx ends. A permanent
// error (a bad channel name) stops listening; the relay then polls. After a failure
// (or a first Listen that failed: listened false) it listens again before waiting,
// and wakes a round once it does: a commit while the connection was down sent a
// NOTIFY nobody heard, and would otherwise wait for the next poll, up to
// PollInterval.
func (r *Relay[Tx]) listen(ctx context.Context, wake chan<- struct{}, listened bool) {
	l, canListen := r.cfg.Notifier.(listener)
	woken := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	for ctx.Err() == nil {
		err := error(nil)
		if !listened && canListen {
			if err = l.Listen(ctx); err == nil {
				listened = true
				r.listening.OK(ctx)
				woken()
				continue
			}
		} else {
			err = r.cfg.Notifier.Wait(ctx)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !idem.IsRetryable(err) {
				r.cfg.Logger.ErrorContext(ctx, "outbox relay: cannot listen; polling only", "err", err)
				return
			}
			listened = false
			r.listening.Fail(ctx, err)
			wait.Sleep(ctx, roundBackoff(r.listening.Failing(), r.cfg.PollInterval))
			continue
		}
		r.listening.OK(ctx)
		woken()
	}
}

// row is one outbox row on its way to the sink.
type row struct {
	id       int64
	msg      idem.Message
	attempts int
	created  int64
	bad      error // why the row cannot be published as written (decodeRow); nil for most
}

// RunOnce publishes one round (on PostgreSQL up to RoundBatches batches, elsewhere
// one) and returns how many messages it marked published.
// After the round, and at most once a second, it records the relay's instance row
// (RelayConfig.Instance), outside the round's transaction.
func (r *Relay[Tx]) RunOnce(ctx context.Context) (int, error) {
	n, err := r.round(ctx)
	if err != nil && ctx.Err() == nil {
		r.m.RoundFailed()
	}
	r.beat(ctx, n, err)
	return n, err
}

// round publishes one round's batches, taking its partitions as the database does
// (see idemsql.OutboxSQL).
func (r *Relay[Tx]) round(ctx context.Context) (int, error) {
	sent := new(sentRows)
	n, err := r.roundOf(context.WithValue(ctx, sentKey{}, sent))
	if err != nil && len(sent.rows) > 0 {
		n = r.remark(ctx, sent.rows, err)
	}
	return n, err
}

// roundOf is round, its acknowledged rows noted in ctx (sentRows).
func (r *Relay[Tx]) roundOf(ctx context.Context) (int, error) {
	s := r.o.stmts
	switch {
	case s.SingleWriter:
		return r.roundSingleWriter(ctx)
	case s.LockPartitions != "":
		return r.roundLocked(ctx, r.o.db.InTx, r.lockPartitions, func(ctx context.Context, q idemsql.Querier, parts []int32) ([]row, error) {
			return r.claim(ctx, q, s.ClaimParts, parts, int64(0))
		}, func(ctx context.Context, q idemsql.Querier, parts []int32, after int64) ([]row, error) {
			return r.claim(ctx, q, s.ClaimParts, parts, after)
		})
	}
	inTx := r.o.db.InTx
	if s.ReadCommittedClaims {
		// Under REPEATABLE READ the claim's locking read would also lock the gaps
		// after the rows it reads, and producers inserting there would wait for the
		// publish.
		inTx = r.o.db.InTxReadCommitted
	}
	return r.roundLocked(ctx, inTx, r.lockParts, r.claimEach, nil)
}

// claimEach reads the batch partition by partition (ClaimPart, ClaimStrays): each
// read walks the pending index in id order and stops at the limit, where one read
// of all the held partitions would sort every pending row of them.
func (r *Relay[Tx]) claimEach(ctx context.Context, q idemsql.Querier, parts []int32) ([]row, error) {
	var rows []row
	for _, p := range parts {
		if len(rows) >= r.batchSize() {
			break
		}
		var more []row
		var err error
		if p == strayPart {
			more, err = r.claimLimit(ctx, q, r.o.stmts.ClaimStrays, r.batchSize()-len(rows))
		} else {
			more, err = r.claimLimit(ctx, q, r.o.stmts.ClaimPart, r.batchSize()-len(rows), p)
		}
		if err != nil {
			return nil, err
		}
		rows = append(rows, more...)
	}
	return rows, nil
}

// roundLocked locks some ordering partitions with due rows, reads a batch of their
// rows, publishes it and marks it, in one transaction: a row is read only when no
// other relay can publish its partition. With claimAfter (ClaimParts) it goes on
// with up to RoundBatches-1 more batches of the same partitions, pipelined: see
// pipeline.
func (r *Relay[Tx]) roundLocked(ctx context.Context, inTx func(context.Context, func(Tx) error) error,
	lock func(context.Context, idemsql.Querier) ([]int32, error), claim func(context.Context, idemsql.Querier, []int32) ([]row, error),
	claimAfter func(context.Context, idemsql.Querier, []int32, int64) ([]row, error)) (int, error) {
	var n int
	err := inTx(ctx, func(tx Tx) error {
		q := r.o.db.Querier(tx)
		parts, err := lock(ctx, q)
		if err != nil || len(parts) == 0 {
			return err
		}
		rows, err := claim(ctx, q, parts)
		if err != nil || len(rows) == 0 {
			return err
		}
		if claimAfter == nil || r.cfg.RoundBatches == 1 || len(rows) < r.cfg.BatchSize || r.probe.Load() > 0 {
			n, err = r.publish(ctx, q, rows)
			return err
		}
		n, err = r.pipeline(ctx, q, rows, func(after int64) ([]row, error) { return claimAfter(ctx, q, parts, after) })
		return err
	})
	return n, r.wrapErr(err)
}

// pipeline publishes rows and up to RoundBatches-1 further batches, each read by
// next (the due rows of the round's partitions after an id, in id order), in the
// round's transaction q. While batch k is sent to the broker, the transaction marks
// batch k-1, which the broker acknowledged, and reads batch k+1: a row is marked
// only after its acknowledgement, and one batch is in flight at a time, so the
// messages of a partition reach the broker in id order. A batch that fails goes
// through publish's one-at-a-time path and ends the round; the batch read behind it
// is left unmarked for the next round. Nothing commits before the round ends. The
// rows of a batch that could not be decoded are recorded as failed before it is
// sent (failBad), so the reads after it see them backing off.
func (r *Relay[Tx]) pipeline(ctx context.Context, q idemsql.Querier, rows []row, next func(after int64) ([]row, error)) (int, error) {
	done := make(chan error, 1)
	var acked []row // published, not yet marked
	n := 0
	for b := 1; ; b++ {
		last, full := rows[len(rows)-1].id, len(rows) == r.cfg.BatchSize
		good, err := r.failBad(ctx, q, rows)
		if err != nil {
			return 0, err
		}
		if msgs := messages(good); len(msgs) > 0 {
			go func() { done <- r.send(ctx, msgs) }()
		} else {
			done <- nil // every row of the batch failed to decode, or waits behind one
		}
		if len(acked) > 0 {
			err = r.markPublished(ctx, q, acked)
			n += len(acked)
			acked = nil
		}
		var more []row
		if err == nil && b < r.cfg.RoundBatches && full {
			more, err = next(last)
		}
		perr := <-done
		if err != nil {
			if perr == nil {
				noteSent(ctx, good) // acknowledged, never marked: see remark
			}
			return 0, err // rolled back: the batches of the round are marked by remark, or published again
		}
		if perr != nil {
			m, err := r.settle(ctx, q, good, perr)
			return n + m, err
		}
		acked = good
		if len(more) == 0 {
			break
		}
		rows = more
	}
	return n + len(acked), r.markPublished(ctx, q, acked)
}

// batchSize is the most messages a round reads: BatchSize, or fewer while Run
// recovers from a failed round. A round that fails after publishing (it could not
// mark its rows or commit: a full disk, a lost connection) publishes its messages
// again in the next round; reading one message after a failure, and twice as many
// after each round that commits, keeps those doubles to one message per failed
// round while the failure lasts, not a whole round (BatchSize × RoundBatches) each.
func (r *Relay[Tx]) batchSize() int {
	if p := r.probe.Load(); p > 0 {
		return int(p)
	}
	return r.cfg.BatchSize
}

func (r *Relay[Tx]) wrapErr(err error) error {
	if err == nil {
		return nil
	}
	return &idem.BackendError{Backend: r.o.db.Dialect().String(), Op: "relay", Err: err}
}
