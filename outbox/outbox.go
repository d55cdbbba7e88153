package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/migrate"
)

// Partitions is how many ordering partitions the outbox has. A message's partition is
// a hash of its OrderingKey (of its ID when it has none); a relay publishes a
// partition's messages only while it holds that partition's lock, so messages with one
// ordering key leave in commit order even with several relays.
const Partitions = idemsql.OutboxPartitions

// Outbox writes messages into the table idem_outbox inside the caller's transactions.
// Create it once with New; it is safe for concurrent use.
type Outbox[Tx any] struct {
	db    idemsql.TxDB[Tx]
	stmts *idemsql.OutboxSQL // db's, fetched once
	now   func() time.Time
	wake  chan struct{} // pokes an in-process relay (SQLite)
	tr    otelx.Tracer

	notifyEvery time.Duration // Config.NotifyEvery; negative: every transaction
	lastNotify  atomic.Int64  // unix ns of the last EnqueueTx that sent NOTIFY
}

// shouldNotify reports whether this EnqueueTx sends NOTIFY (see Config.NotifyEvery).
func (o *Outbox[Tx]) shouldNotify() bool {
	if o.notifyEvery < 0 {
		return true
	}
	now, last := time.Now().UnixNano(), o.lastNotify.Load()
	return now-last >= int64(o.notifyEvery) && o.lastNotify.CompareAndSwap(last, now)
}

// Config configures an Outbox. The zero value is ready to use.
type Config struct {
	// SkipMigrate leaves the schema alone, for deployments that apply `idem migrate
	// print` with their own tool: New then only checks that idem_outbox is up to
	// date, and fails with a *migrate.BehindError naming the missing migration.
	SkipMigrate bool
	// TracerProvider makes EnqueueTx's span (idem.outbox.enqueue); nil means the
	// global one (otel.GetTracerProvider). Propagator writes the span's context into
	// each message's headers (traceparent, tracestate); nil means the global one
	// (otel.GetTextMapPropagator), which is a no-op until the application sets one.
	TracerProvider trace.TracerProvider
	Propagator     propagation.TextMapPropagator
	// NotifyEvery bounds how often EnqueueTx sends NOTIFY idem_outbox on PostgreSQL:
	// one transaction per NotifyEvery per Outbox carries it (default 20 ms; negative:
	// every transaction). PostgreSQL serializes the commits of notifying
	// transactions (a cluster-wide lock held through each one's commit, WAL flush
	// included), so a NOTIFY in every transaction caps concurrent producers at one
	// commit per flush. A relay woken by a notification polls quickly for a while
	// (RelayConfig.PollInterval), which finds the messages of the transactions in
	// between; one whose only notifying neighbour rolled back waits for the relay's
	// PollInterval at most.
	NotifyEvery time.Duration
}

// DefaultNotifyEvery is Config.NotifyEvery's default.
const DefaultNotifyEvery = 20 * time.Millisecond

// New returns the outbox of db, creating or upgrading its table (package migrate).
func New[Tx any](ctx context.Context, db idemsql.TxDB[Tx], cfg Config) (*Outbox[Tx], error) {
	if err := db.Validate(); err != nil {
		return nil, err
	}
	if err := migrate.Ensure(ctx, db, cfg.SkipMigrate, migrate.Outbox); err != nil {
		return nil, err
	}
	every := cfg.NotifyEvery
	if every == 0 {
		every = DefaultNotifyEvery
	}
	return &Outbox[Tx]{db: db, stmts: db.Driver.Outbox(), now: time.Now, wake: make(chan struct{}, 1),
		tr: otelx.New(cfg.TracerProvider, cfg.Propagator), notifyEvery: every}, nil
}

// EnqueueTx writes msgs in tx: they are published if and only if tx commits. A message
// without an ID gets a UUIDv7, which becomes its broker dedup id and its consumers'
// idempotency key; the IDs are returned in order. On PostgreSQL the commit also wakes
// the relays (NOTIFY idem_outbox, carried by at most one transaction per
// Config.NotifyEvery), so publication does not wait for a poll.
//
// The trace context of ctx (its idem.outbox.enqueue span) is stored in each
// message's headers, under the propagator's names (traceparent, tracestate), so the
// relay publishes it in the same trace; the caller's Headers map is not modified.
func (o *Outbox[Tx]) EnqueueTx(ctx context.Context, tx Tx, msgs ...idem.Message) (ids []string, err error) {
	span := otelx.NoSpan
	if !o.tr.Off() {
		ctx, span = o.tr.Start(ctx, otelx.SpanOutboxEnqueue, otelx.KindInternal...)
		defer func() { otelx.Fail(span, err); span.End() }()
	}
	ids = make([]string, len(msgs))
	rows := make([]newRow, len(msgs))
	for i, m := range msgs {
		if m.ID == "" {
			m.ID = idemkey.NewV7()
		}
		if err := m.Validate(); err != nil {
			return nil, fmt.Errorf("message %d of %d: %w", i+1, len(msgs), err)
		}
		if len(msgs) == 1 {
			otelx.MessageAttrs(span, "", "create", m, "")
		}
		headers, err := json.Marshal(o.tr.Inject(ctx, m.Headers))
		if err != nil {
			return nil, err
		}
		payload := m.Payload
		if payload == nil {
			payload = []byte{}
		}
		rows[i] = newRow{m.ID, m.Topic, m.OrderingKey, int32(partition(m)), string(headers), payload}
		ids[i] = m.ID
	}
	if len(rows) > 0 {
		if err := o.insert(ctx, o.db.Querier(tx), rows, o.now().UnixMilli()); err != nil {
			return nil, &idem.BackendError{Backend: o.db.Dialect().String(), Op: "outbox.enqueue", Err: err}
		}
	}
	select { // an in-process relay looks again soon; it retries briefly if tx is not yet committed
	case o.wake <- struct{}{}:
	default:
	}
	return ids, nil
}

// newRow is one message as EnqueueTx inserts it.
type newRow struct {
	id, topic, orderingKey string
	part                   int32
	headers                string
	payload                []byte
}

// insert writes rows in one statement where the database takes arrays
// (InsertArrays, PostgreSQL), which also sends the relays' NOTIFY when it is this
// transaction's turn (shouldNotify), so one message or a thousand cost one round
// trip; elsewhere in multi-row INSERTs of up to MaxInsertRows rows. Rows get their
// ids in the order given, so one ordering key's messages leave in that order.
func (o *Outbox[Tx]) insert(ctx context.Context, q idemsql.Querier, rows []newRow, now int64) error {
	if o.stmts.InsertArrays != "" {
		return o.insertArrays(ctx, q, rows, now)
	}
	for len(rows) > 0 {
		n := len(rows)
		if o.stmts.MaxInsertRows > 0 {
			n = min(n, o.stmts.MaxInsertRows)
		}
		args := make([]any, 1, 1+6*n)
		args[0] = now
		for _, r := range rows[:n] {
			args = append(args, r.id, r.topic, r.orderingKey, r.part, r.headers, r.payload)
		}
		if _, err := q.Exec(ctx, o.stmts.InsertRows(n), args...); err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}

// insertArrays writes rows as one array per column.
func (o *Outbox[Tx]) insertArrays(ctx context.Context, q idemsql.Querier, rows []newRow, now int64) error {
	cols := struct {
		ids, topics, keys, headers []string
		parts                      []int32
		payloads                   [][]byte
	}{}
	for _, r := range rows {
		cols.ids, cols.topics, cols.keys = append(cols.ids, r.id), append(cols.topics, r.topic), append(cols.keys, r.orderingKey)
		cols.parts, cols.headers, cols.payloads = append(cols.parts, r.part), append(cols.headers, r.headers), append(cols.payloads, r.payload)
	}
	query := o.stmts.InsertArrays
	if o.stmts.InsertArraysNotify != "" && o.shouldNotify() {
		query = o.stmts.InsertArraysNotify
	}
	_, err := q.Exec(ctx, query, cols.ids, cols.topics, cols.keys, cols.parts, cols.headers, cols.payloads, now)
	return err
}

// partition returns m's ordering partition.
func partition(m idem.Message) int {
	h := fnv.New32a()
	if m.OrderingKey != "" {
		h.Write([]byte(m.OrderingKey))
	} else {
		h.Write([]byte(m.ID))
	}
	return int(h.Sum32() % Partitions)
}

// Schema returns the SQL that creates the outbox table and its indexes in d, with
// the idem_migrations rows New checks for: what services in other languages can
// read (idem relay --schema). It is the outbox part of `idem migrate print`.
func Schema(d idemsql.Dialect) (string, error) {
	return migrate.Script(d, false, migrate.Outbox)
}

// Parked is a message the relay gave up on after MaxAttempts: visible, with its last
// error, until Retry puts it back or Admin.Discard gives up on it.
type Parked struct {
	ID        int64
	Message   idem.Message
	Attempts  int
	LastError string
	ParkedAt  time.Time
	// DiscardedAt and DiscardReason are set once an operator discarded it
	// (Admin.Discard): it is then never published. Only Admin.Parked lists those.
	DiscardedAt   time.Time
	DiscardReason string
	// DecodeError says what of the stored row could not be decoded, "" when all of
	// it was: headers that are not a JSON object of strings (a row another service
	// wrote), or on SQLite a column holding a value of another type. The fields it
	// names hold what could be read.
	DecodeError string
}

// Parked returns up to limit parked messages, oldest first; discarded ones are left
// out (Admin.Parked lists them too).
func (o *Outbox[Tx]) Parked(ctx context.Context, limit int) ([]Parked, error) {
	if limit <= 0 {
		limit = 100
	}
	return listParked(ctx, o.db, o.stmts.ParkedPending, limit)
}

// ErrNotParked is returned by Retry for an id that is not a parked message (or was
// discarded), and by Admin.Discard for one that is not parked or discarded already.
// It matches idem.ErrNotFound.
var ErrNotParked error = &idem.NotFoundError{Msg: "outbox: no parked message with this id"}

// Retry puts parked message id back in line, with its attempts reset (one the
// log-based relay parked as a new row: see Admin.Retry).
func (o *Outbox[Tx]) Retry(ctx context.Context, id int64) error {
	if err := retry(ctx, o.db, o.stmts, o.now, id); err != nil {
		return err
	}
	o.poke()
	return nil
}

func (o *Outbox[Tx]) poke() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}
