package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/metrics"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/internal/wait"
)

// Notifier wakes a relay when messages were committed: idempg.NewNotifier listens for
// the NOTIFY that EnqueueTx sends on PostgreSQL. Wait returns when a notification
// arrives, or with an error when the listening connection failed (the relay then
// polls and calls Wait again).
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
	// MaxAttempts is how many failed publications park a message. Default 10.
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
	// idem_relay_publish_duration_seconds and idem_relay_lag_seconds.
	Registerer prometheus.Registerer
	// Logger receives failed rounds at warn level. Default slog.Default().
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
	r := &Relay[Tx]{o: o, sink: sink, cfg: cfg, inst: newInstance(cfg.Instance),
		tr: otelx.New(cfg.TracerProvider, cfg.Propagator), sys: otelx.System(sink)}
	if r.m, err = metrics.NewRelay(cfg.Registerer, r.backlog); err != nil {
		return nil, err
	}
	return r, nil
}

// Run relays until ctx ends and returns ctx's error. Failed rounds are logged and
// retried; they never end Run.
func (r *Relay[Tx]) Run(ctx context.Context) error {
	wake := make(chan struct{}, 1)
	if r.cfg.Notifier != nil {
		// LISTEN before the first round, so no commit falls between that round and it.
		if l, ok := r.cfg.Notifier.(interface{ Listen(context.Context) error }); ok {
			if err := l.Listen(ctx); err != nil && ctx.Err() == nil {
				r.cfg.Logger.WarnContext(ctx, "outbox relay: LISTEN failed; polling until it works", "err", err)
			}
		}
		go r.listen(ctx, wake)
	}
	attentive := min(MinPollInterval, r.cfg.PollInterval)
	idle := attentive // the wait before the next unprompted round: attentive at first, backing off while idle
	poll := time.NewTimer(idle)
	defer poll.Stop()
	cleanup := time.NewTicker(r.cfg.CleanupInterval)
	defer cleanup.Stop()
	quick := 0    // rounds left of quick rechecks after an in-process wake (the tx may not have committed yet)
	failures := 0 // consecutive failed rounds: they back off, whatever wakes the relay
	for {
		n, err := r.RunOnce(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			failures++
			r.cfg.Logger.WarnContext(ctx, "outbox relay: round failed", "err", err, "consecutive", failures)
			if !wait.Sleep(ctx, min(50*time.Millisecond<<min(failures-1, 6), r.cfg.PollInterval)) {
				return ctx.Err()
			}
			continue
		}
		failures = 0
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

// listen turns the Notifier's notifications into wakes until ctx ends. A permanent
// error (a bad channel name) stops listening; the relay then polls.
func (r *Relay[Tx]) listen(ctx context.Context, wake chan<- struct{}) {
	for ctx.Err() == nil {
		if err := r.cfg.Notifier.Wait(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			if !idem.IsRetryable(err) {
				r.cfg.Logger.ErrorContext(ctx, "outbox relay: cannot listen; polling only", "err", err)
				return
			}
			r.cfg.Logger.WarnContext(ctx, "outbox relay: listening failed; polling meanwhile", "err", err)
			wait.Sleep(ctx, r.cfg.PollInterval)
			continue
		}
		select {
		case wake <- struct{}{}:
		default:
		}
	}
}

// row is one outbox row on its way to the sink.
type row struct {
	id       int64
	msg      idem.Message
	attempts int
	created  int64
}

// RunOnce publishes one round (on PostgreSQL up to RoundBatches batches, elsewhere
// one) and returns how many messages it marked published.
// After the round, and at most once a second, it records the relay's instance row
// (RelayConfig.Instance), outside the round's transaction.
func (r *Relay[Tx]) RunOnce(ctx context.Context) (int, error) {
	n, err := r.round(ctx)
	r.beat(ctx, n, err)
	return n, err
}

// round publishes one round's batches.
func (r *Relay[Tx]) round(ctx context.Context) (int, error) {
	switch r.o.db.Dialect {
	case idem.SQLite:
		return r.roundSQLite(ctx)
	case idem.MySQL:
		// As on PostgreSQL, with the partitions' rows in idem_outbox_parts locked
		// FOR UPDATE SKIP LOCKED, in a READ COMMITTED transaction: under REPEATABLE
		// READ the claim's locking read would also lock the gaps after the rows it
		// reads, and producers inserting there would wait for the publish.
		return r.roundLocked(ctx, r.o.db.InTxReadCommitted, r.lockPartitionsMySQL, r.claimEach, nil)
	}
	return r.roundLocked(ctx, r.o.db.InTx, r.lockPartitions, func(ctx context.Context, q idem.Querier, parts []int32) ([]row, error) {
		return r.claim(ctx, q, claimPostgres, parts, int64(0))
	}, func(ctx context.Context, q idem.Querier, parts []int32, after int64) ([]row, error) {
		return r.claim(ctx, q, claimPostgres, parts, after)
	})
}

// claimEach reads the batch partition by partition (MySQL): each read walks the
// pending index in id order and stops at the limit, where one read of all the held
// partitions would sort every pending row of them.
func (r *Relay[Tx]) claimEach(ctx context.Context, q idem.Querier, parts []int32) ([]row, error) {
	var rows []row
	for _, p := range parts {
		if len(rows) >= r.cfg.BatchSize {
			break
		}
		more, err := r.claimLimit(ctx, q, claimMySQL, r.cfg.BatchSize-len(rows), p)
		if err != nil {
			return nil, err
		}
		rows = append(rows, more...)
	}
	return rows, nil
}

// roundLocked locks some ordering partitions with due rows, reads a batch of their
// rows, publishes it and marks it, in one transaction: a row is read only when no
// other relay can publish its partition. With claimAfter (PostgreSQL) it goes on
// with up to RoundBatches-1 more batches of the same partitions, pipelined: see
// pipeline.
func (r *Relay[Tx]) roundLocked(ctx context.Context, inTx func(context.Context, func(Tx) error) error,
	lock func(context.Context, idem.Querier) ([]int32, error), claim func(context.Context, idem.Querier, []int32) ([]row, error),
	claimAfter func(context.Context, idem.Querier, []int32, int64) ([]row, error)) (int, error) {
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
		if claimAfter == nil || r.cfg.RoundBatches == 1 || len(rows) < r.cfg.BatchSize {
			n, err = r.publish(ctx, q, rows)
			return err
		}
		n, err = r.pipeline(ctx, q, rows, func(after int64) ([]row, error) { return claimAfter(ctx, q, parts, after) })
		return err
	})
	return n, wrapErr(r.o.db.Dialect.String(), err)
}

// pipeline publishes rows and up to RoundBatches-1 further batches, each read by
// next (the due rows of the round's partitions after an id, in id order), in the
// round's transaction q. While batch k is sent to the broker, the transaction marks
// batch k-1, which the broker acknowledged, and reads batch k+1: a row is marked
// only after its acknowledgement, and one batch is in flight at a time, so the
// messages of a partition reach the broker in id order. A batch that fails goes
// through publish's one-at-a-time path and ends the round; the batch read behind it
// is left unmarked for the next round. Nothing commits before the round ends.
func (r *Relay[Tx]) pipeline(ctx context.Context, q idem.Querier, rows []row, next func(after int64) ([]row, error)) (int, error) {
	done := make(chan error, 1)
	var acked []row // published, not yet marked
	n := 0
	for b := 1; ; b++ {
		msgs := messages(rows)
		go func() { done <- r.send(ctx, msgs) }()
		var err error
		if len(acked) > 0 {
			err = r.markPublished(ctx, q, acked)
			n += len(acked)
			acked = nil
		}
		var more []row
		if err == nil && b < r.cfg.RoundBatches && len(rows) == r.cfg.BatchSize {
			more, err = next(rows[len(rows)-1].id)
		}
		perr := <-done
		if err != nil {
			return 0, err // rolled back: every batch of the round is published again
		}
		if perr != nil {
			m, err := r.settle(ctx, q, rows, perr)
			return n + m, err
		}
		acked = rows
		if len(more) == 0 {
			break
		}
		rows = more
	}
	return n + len(acked), r.markPublished(ctx, q, acked)
}

// roundSQLite reads a batch, publishes it without holding SQLite's write lock (so
// producers keep writing), then marks it in a short transaction. One relay per file.
func (r *Relay[Tx]) roundSQLite(ctx context.Context) (int, error) {
	var rows []row
	err := r.o.db.InTx(ctx, func(tx Tx) (err error) {
		rows, err = r.claim(ctx, r.o.db.Querier(tx), claimSQLite)
		return err
	})
	if err != nil || len(rows) == 0 {
		return 0, wrapErr("sqlite", err)
	}
	// Publish with no transaction open: a write transaction holds SQLite's only
	// write lock, and a slow or unreachable broker would stall every writer of the
	// database for as long as the publish takes. Each mark commits on its own.
	n, err := r.publish(ctx, shortTx[Tx]{r.o.db}, rows)
	return n, wrapErr("sqlite", err)
}

// shortTx runs each statement in a transaction of its own.
type shortTx[Tx any] struct{ db idem.TxDB[Tx] }

func (s shortTx[Tx]) Exec(ctx context.Context, query string, args ...any) (n int64, err error) {
	err = s.db.InTx(ctx, func(tx Tx) error {
		n, err = s.db.Querier(tx).Exec(ctx, query, args...)
		return err
	})
	return n, err
}

func (s shortTx[Tx]) Query(ctx context.Context, query string, args ...any) (idem.Rows, error) {
	return nil, errors.New("outbox: internal error: Query outside a transaction")
}

func (s shortTx[Tx]) QueryRow(ctx context.Context, query string, args ...any) idem.Row {
	return errRow{errors.New("outbox: internal error: QueryRow outside a transaction")}
}

type errRow struct{ err error }

func (e errRow) Scan(...any) error { return e.err }

func wrapErr(backend string, err error) error {
	if err == nil {
		return nil
	}
	return &idem.BackendError{Backend: backend, Op: "relay", Err: err}
}

// A row is due when it is pending and no earlier row of its ordering key is waiting
// out a backoff (which would let it overtake). Only rows that failed before can be
// backing off (attempts > 0), and the partial index idem_outbox_failing holds just
// those, so the check costs a probe of a nearly empty index.
const dueSQL = `FROM idem_outbox o
WHERE o.published_at IS NULL AND o.parked_at IS NULL AND o.available_at <= $1
  AND (o.ordering_key = '' OR NOT EXISTS (SELECT 1 FROM idem_outbox e
       WHERE e.ordering_key = o.ordering_key AND e.id < o.id AND e.attempts > 0
         AND e.published_at IS NULL AND e.parked_at IS NULL AND e.available_at > $1))`

const selectCols = `SELECT o.id, o.msg_id, o.topic, o.ordering_key, o.headers, o.payload, o.attempts, o.created_at `

// On PostgreSQL a round first locks some ordering partitions that have due rows, at
// random so that relays spread over them, and only then reads rows of the partitions
// it holds: a row is read only when no other relay can publish its partition, and the
// earliest pending row of each held partition is visible to the read. (Locking the
// partition row by row inside one scan would not do: a scan that skipped a partition
// held by a relay that then rolled back could take the partition's later rows.)
//
// The partitions with due rows are found by skipping through idem_outbox_part in
// partition order, one LIMIT 1 read per partition: at most 64 index probes whatever
// the backlog. (An EXISTS per partition let the planner hash every pending row each
// round, or walk idem_outbox_pending, dead entries of just-published rows included,
// once per partition.) OFFSET 0 keeps the lock out of the random ordering, so only
// the partitions returned are locked: pushed below the sort, it locked them all.
var lockPartitionsSQL = `WITH RECURSIVE due AS (
	(SELECT o.part FROM idem_outbox o
	WHERE o.published_at IS NULL AND o.parked_at IS NULL AND o.available_at <= $1 ORDER BY o.part LIMIT 1)
	UNION ALL
	SELECT (SELECT o.part FROM idem_outbox o WHERE o.part > due.part
		AND o.published_at IS NULL AND o.parked_at IS NULL AND o.available_at <= $1 ORDER BY o.part LIMIT 1)
	FROM due WHERE due.part IS NOT NULL)
SELECT part FROM (SELECT part FROM due WHERE part IS NOT NULL ORDER BY random() OFFSET 0) s
WHERE pg_try_advisory_xact_lock(hashtext('idem_outbox:' || current_schema()), part) LIMIT $2`

const (
	// claimPostgres reads without FOR UPDATE: the partition locks already keep
	// other relays off these rows, nothing else writes a pending row that is not
	// parked (Admin's Retry and Discard take parked rows, cleanup published ones),
	// and the read's snapshot, taken after the locks, sees every mark of the
	// partitions' previous holders. A row lock would write each row (and WAL)
	// once more before the mark.
	claimPostgres = selectCols + dueSQL + `
  AND o.part = ANY($3::int[]) AND o.id > $4
ORDER BY o.id LIMIT $2`
	claimSQLite = selectCols + dueSQL + `
ORDER BY o.id LIMIT $2`
	claimMySQL = selectCols + dueSQL + `
  AND o.part = $3
ORDER BY o.id LIMIT $2 FOR UPDATE`

	// duePartsMySQL lists the partitions with pending rows, one index probe each
	// (the LIMIT keeps MySQL from reading every pending row to answer); some may be
	// backing off, which the claim then skips. lockPartsMySQL locks some of them, in
	// the index's order, so that it locks only the rows it returns.
	duePartsMySQL = `SELECT p.part FROM idem_outbox_parts p WHERE (SELECT 1 FROM idem_outbox o
		WHERE o.published_at IS NULL AND o.parked_at IS NULL AND o.part = p.part LIMIT 1) IS NOT NULL`
	lockPartsMySQL = `SELECT part FROM idem_outbox_parts WHERE part IN (%s) ORDER BY part LIMIT %d FOR UPDATE SKIP LOCKED`
)

// The partition locks are keyed by the schema too, so outboxes in two schemas of one
// database do not hold each other back.
//
// partitionsPerRound is how many ordering partitions a PostgreSQL relay takes per
// round: a quarter, so up to four relays work side by side on a backlog.
const partitionsPerRound = Partitions / 4

// partitionsMax is the highest partition number, as SQL text.
var partitionsMax = strconv.Itoa(Partitions - 1)

// Cleanup deletes published messages older than Retention, in batches of
// CleanupBatch, and returns how many it deleted. It also deletes the rows of relay
// instances silent for a day.
func (r *Relay[Tx]) Cleanup(ctx context.Context) (int, error) {
	if err := r.o.db.InTx(ctx, func(tx Tx) error {
		_, err := r.o.db.Querier(tx).Exec(ctx, "DELETE FROM idem_outbox_relays WHERE last_round_at < $1",
			r.o.now().Add(-relayForgetAfter).UnixMilli())
		return err
	}); err != nil {
		return 0, wrapErr(r.o.db.Dialect.String(), err)
	}
	cutoff := r.o.now().Add(-r.cfg.Retention).UnixMilli()
	total := 0
	for {
		var n int64
		err := r.o.db.InTx(ctx, func(tx Tx) (err error) {
			n, err = r.o.db.Querier(tx).Exec(ctx, cleanupSQL[r.o.db.Dialect], cutoff, r.cfg.CleanupBatch)
			return err
		})
		if err != nil {
			return total, wrapErr(r.o.db.Dialect.String(), err)
		}
		total += int(n)
		if n < int64(r.cfg.CleanupBatch) {
			return total, nil
		}
	}
}

// cleanupSQL deletes up to $2 rows published before $1. MySQL can neither limit an
// IN subquery nor read the table it deletes from in one, but limits DELETE itself.
var cleanupSQL = map[idem.Dialect]string{
	idem.Postgres: `DELETE FROM idem_outbox WHERE id IN (
		SELECT id FROM idem_outbox WHERE published_at IS NOT NULL AND published_at < $1 LIMIT $2)`,
	idem.SQLite: `DELETE FROM idem_outbox WHERE id IN (
		SELECT id FROM idem_outbox WHERE published_at IS NOT NULL AND published_at < $1 LIMIT $2)`,
	idem.MySQL: `DELETE FROM idem_outbox WHERE published_at IS NOT NULL AND published_at < $1 ORDER BY published_at LIMIT $2`,
}

// backlog feeds the gauges: unpublished count, age of the oldest, parked count.
func (r *Relay[Tx]) backlog() (unpublished, oldestAge, parked float64) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var u, p int64
	var oldest *int64
	err := r.o.db.InTx(ctx, func(tx Tx) error {
		return r.o.db.Querier(tx).QueryRow(ctx, `SELECT
			COUNT(CASE WHEN parked_at IS NULL THEN 1 END),
			COUNT(CASE WHEN parked_at IS NOT NULL AND NOT EXISTS (
				SELECT 1 FROM idem_outbox_discarded x WHERE x.id = idem_outbox.id) THEN 1 END),
			MIN(CASE WHEN parked_at IS NULL THEN created_at END)
			FROM idem_outbox WHERE published_at IS NULL`).Scan(&u, &p, &oldest)
	})
	if err != nil {
		return -1, -1, -1
	}
	if oldest != nil {
		oldestAge = float64(r.o.now().UnixMilli()-*oldest) / 1000
	}
	return float64(u), oldestAge, float64(p)
}
