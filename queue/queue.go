package queue

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/metrics"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/internal/sqltext"
	"github.com/idemhq/idem/migrate"
)

// Queue writes messages into the table idem_queue inside the caller's
// transactions, and is where Sources claim them from. Create it once per
// database with New; it is safe for concurrent use.
type Queue[Tx any] struct {
	db    idemsql.TxDB[Tx]
	stmts *idemsql.QueueSQL // db's, fetched once
	cfg   Config
	tr    otelx.Tracer
	m     *metrics.Queue // nil without Config.Registerer

	lastNotify atomic.Int64 // unix ns of the last InsertTx that sent NOTIFY

	mu   sync.Mutex
	kick chan struct{} // closed (and replaced) by every InsertTx: wakes this process's Sources
}

// Config configures a Queue. The zero value is ready to use.
type Config struct {
	// SkipMigrate leaves the schema alone, for deployments that apply `idem migrate
	// print` with their own tool: New then only checks that idem_queue is up to
	// date, and fails with a *migrate.BehindError naming the missing migration.
	SkipMigrate bool
	// NotifyEvery bounds how often InsertTx sends NOTIFY idem_queue on PostgreSQL:
	// one transaction per NotifyEvery per Queue carries it (default 5 ms;
	// negative: every transaction). PostgreSQL serializes the commits of notifying
	// transactions, so a NOTIFY in every one caps concurrent producers; a Source
	// woken by one polls quickly for a while (SourceConfig.MinPollInterval) and
	// finds the messages of the transactions in between.
	NotifyEvery time.Duration
	// Retention is how long finished messages (applied, duplicates, dead-lettered,
	// cancelled) stay in idem_queue, for the operator's view, before Run deletes
	// them. Default 24 h. The keys of applied messages are the inbox's to keep
	// (inbox Config.Retention), not this table's.
	Retention time.Duration
	// Periodic is the schedules Run enqueues the messages of (see Periodic).
	Periodic []Periodic
	// Now is the clock of run-at times, leases and retention. Nil means time.Now.
	Now func() time.Time
	// Logger receives Run's failures at warn level. Default slog.Default().
	Logger *slog.Logger
	// TracerProvider makes InsertTx's span (idem.queue.enqueue); nil means the
	// global one. Propagator writes the span's context into each message's
	// headers (traceparent), so the consumer's spans join the producer's trace;
	// nil means the global one (otel.GetTextMapPropagator).
	TracerProvider trace.TracerProvider
	Propagator     propagation.TextMapPropagator
	// Registerer, if set, receives the queue's metrics (docs/observability.md):
	// idem_queue_enqueued_total{topic,outcome}, from InsertTx;
	// idem_queue_claimed_total{topic}, idem_queue_settled_total{topic,outcome}
	// and idem_queue_parked_total{topic}, from its Sources;
	// idem_queue_periodic_total{schedule,outcome} and idem_queue_swept_total,
	// from Run; and the gauges Run keeps every GaugeInterval,
	// idem_queue_messages{topic,state} and
	// idem_queue_oldest_ready_age_seconds{topic}. Run them in one process per
	// database for the gauges, or read them with max by (topic): each process
	// counts the whole table.
	Registerer prometheus.Registerer
	// GaugeInterval is how often Run, given a Registerer, counts the messages per
	// topic and state for the gauges: one Status query, which reads every
	// unfinished row (BenchmarkStatus: about 0.3 s on PostgreSQL, 0.6 s on
	// SQLite and 1.1 s on MySQL for 100 000 of them). Default 30 s.
	GaugeInterval time.Duration
}

const (
	// DefaultNotifyEvery is Config.NotifyEvery's default.
	DefaultNotifyEvery = 5 * time.Millisecond
	// DefaultRetention is Config.Retention's default.
	DefaultRetention = 24 * time.Hour
	// DefaultGaugeInterval is Config.GaugeInterval's default.
	DefaultGaugeInterval = 30 * time.Second
)

// New returns the queue of db, creating or upgrading its tables (package migrate).
func New[Tx any](ctx context.Context, db idemsql.TxDB[Tx], cfg Config) (*Queue[Tx], error) {
	if err := db.Validate(); err != nil {
		return nil, err
	}
	cfg.NotifyEvery = cmp.Or(cfg.NotifyEvery, DefaultNotifyEvery)
	cfg.Retention = cmp.Or(cfg.Retention, DefaultRetention)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.GaugeInterval = cmp.Or(cfg.GaugeInterval, DefaultGaugeInterval)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Retention < 0 {
		return nil, &idem.InputError{Field: "Config.Retention", Reason: "is negative", Fix: "leave it 0 for the default of 24 hours"}
	}
	if cfg.GaugeInterval < 0 {
		return nil, &idem.InputError{Field: "Config.GaugeInterval", Reason: "is negative", Fix: "leave it 0 for the default of 30 seconds"}
	}
	if err := checkPeriodic(cfg.Periodic); err != nil {
		return nil, err
	}
	m, err := metrics.NewQueue(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("queue: register metrics: %w", err)
	}
	if err := migrate.Ensure(ctx, db, cfg.SkipMigrate, migrate.Queue); err != nil {
		return nil, err
	}
	return &Queue[Tx]{db: db, stmts: db.Driver.Queue(), cfg: cfg, tr: otelx.New(cfg.TracerProvider, cfg.Propagator),
		m: m, kick: make(chan struct{})}, nil
}

// Job is a message with what only a queue does with it.
type Job struct {
	idem.Message
	// RunAt is when the message may run: not before. Zero means now.
	RunAt time.Time
}

// Enqueued is what became of one Job of InsertTx.
type Enqueued struct {
	// ID is the message's ID (minted when the Job had none).
	ID string
	// Duplicate says nothing was written: a message of the same topic and ID is
	// in the queue, unfinished (waiting, scheduled, running or retrying), or an
	// earlier Job of the same call had them. It runs once. A message whose
	// earlier copy finished already is written, and its consumer's inbox drops
	// it by its key (counted as a duplicate there).
	Duplicate bool
}

// EnqueueTx writes msgs in tx, to run as soon as tx commits, and returns their
// IDs in order: the same as outbox.Outbox.EnqueueTx, so a producer moves
// between a broker and the database as the queue by the value it holds. A
// message without an ID gets a UUIDv7. One whose topic and ID are in the queue
// unfinished already is not written again (InsertTx says which).
func (q *Queue[Tx]) EnqueueTx(ctx context.Context, tx Tx, msgs ...idem.Message) ([]string, error) {
	jobs := make([]Job, len(msgs))
	for i, m := range msgs {
		jobs[i] = Job{Message: m}
	}
	res, err := q.InsertTx(ctx, tx, jobs...)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(res))
	for i, r := range res {
		ids[i] = r.ID
	}
	return ids, nil
}

// InsertTx writes jobs in tx: they run if and only if tx commits, each at its
// RunAt. It reports, per job, its ID and whether it was a duplicate (see
// Enqueued). On PostgreSQL the commit wakes the Sources (NOTIFY idem_queue, in
// at most one transaction per Config.NotifyEvery); in this process they are
// woken at once.
//
// The trace context of ctx (its idem.queue.enqueue span) is stored in each
// message's headers, as the outbox does; the caller's Headers map is not
// modified.
func (q *Queue[Tx]) InsertTx(ctx context.Context, tx Tx, jobs ...Job) (res []Enqueued, err error) {
	span := otelx.NoSpan
	if !q.tr.Off() {
		ctx, span = q.tr.Start(ctx, otelx.SpanQueueEnqueue, otelx.KindInternal...)
		defer func() { otelx.Fail(span, err); span.End() }()
	}
	now := q.cfg.Now().UnixMilli()
	rows := make([]row, len(jobs))
	res = make([]Enqueued, len(jobs))
	for i, j := range jobs {
		m := j.Message
		if m.ID == "" {
			m.ID = idemkey.NewV7()
		}
		if err := m.Validate(); err != nil {
			return nil, fmt.Errorf("job %d of %d: %w", i+1, len(jobs), err)
		}
		if err := fitsColumns(m); err != nil {
			return nil, fmt.Errorf("job %d of %d: %w", i+1, len(jobs), err)
		}
		if len(jobs) == 1 {
			otelx.MessageAttrs(span, "", "create", m, "")
		}
		headers, err := json.Marshal(q.tr.Inject(ctx, m.Headers))
		if err != nil {
			return nil, err
		}
		at := now
		if !j.RunAt.IsZero() {
			at = j.RunAt.UnixMilli()
		}
		payload := m.Payload
		if payload == nil {
			payload = []byte{}
		}
		rows[i] = row{m.ID, m.Topic, m.OrderingKey, string(headers), payload, at}
		res[i].ID = m.ID
	}
	if len(rows) > 0 {
		dup, err := q.insert(ctx, q.db.Querier(tx), rows, now)
		if err != nil {
			return nil, &idem.BackendError{Backend: q.db.Dialect().String(), Op: "queue.enqueue", Err: err}
		}
		for i := range res {
			res[i].Duplicate = dup[i]
			q.countEnqueued(rows[i].topic, dup[i])
		}
	}
	q.wakeLocal()
	return res, nil
}

// maxColumn bounds a message's topic and ordering key, in bytes: MySQL's
// idem_queue holds 255 (PostgreSQL and SQLite would take more, so a producer
// that worked there would fail only on MySQL).
const maxColumn = 255

// fitsColumns checks what Message.Validate leaves to the table: the lengths of
// the topic and the ordering key.
func fitsColumns(m idem.Message) error {
	for _, f := range []struct{ field, v string }{{"Message.Topic", m.Topic}, {"Message.OrderingKey", m.OrderingKey}} {
		if len(f.v) > maxColumn {
			return &idem.InputError{Field: f.field, Reason: fmt.Sprintf("is longer than %d bytes (got %d)", maxColumn, len(f.v)),
				Fix: "shorten it, or hash it into a fixed-size name"}
		}
	}
	return nil
}

// countEnqueued counts one message of InsertTx (idem_queue_enqueued_total).
func (q *Queue[Tx]) countEnqueued(topic string, dup bool) {
	if dup {
		q.m.Enqueued(topic, "duplicate", 1)
	} else {
		q.m.Enqueued(topic, "written", 1)
	}
}

// row is one message as InsertTx writes it.
type row struct {
	id, topic, orderingKey, headers string
	payload                         []byte
	at                              int64
}

// insert writes rows and reports which were duplicates: in one statement where
// the database takes arrays (PostgreSQL, which also notifies when it is this
// transaction's turn), else one statement a row.
func (q *Queue[Tx]) insert(ctx context.Context, qr idemsql.Querier, rows []row, now int64) ([]bool, error) {
	dup := make([]bool, len(rows))
	if q.stmts.InsertArrays == "" {
		for i, r := range rows {
			n, err := qr.Exec(ctx, q.stmts.Insert, r.id, r.topic, r.orderingKey, r.headers, r.payload, now, r.at)
			if err != nil {
				return nil, err
			}
			dup[i] = n == 0
		}
		return dup, nil
	}
	var ids, topics, keys, headers []string
	var payloads [][]byte
	var ats []int64
	for _, r := range rows {
		ids, topics, keys, headers = append(ids, r.id), append(topics, r.topic), append(keys, r.orderingKey), append(headers, r.headers)
		payloads, ats = append(payloads, r.payload), append(ats, r.at)
	}
	query := q.stmts.InsertArrays
	if q.stmts.InsertArraysNotify != "" && q.shouldNotify() {
		query = q.stmts.InsertArraysNotify
	}
	rs, err := qr.Query(ctx, query, ids, topics, keys, headers, payloads, ats, now)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	written := map[[2]string]bool{}
	for rs.Next() {
		var k [2]string
		if err := rs.Scan(&k[0], &k[1]); err != nil {
			return nil, err
		}
		written[k] = true
	}
	if err := rs.Err(); err != nil {
		return nil, err
	}
	for i, r := range rows { // the first of equal (topic, id) in the batch is the one written
		k := [2]string{r.topic, r.id}
		dup[i] = !written[k]
		delete(written, k)
	}
	return dup, nil
}

// shouldNotify reports whether this InsertTx sends NOTIFY (Config.NotifyEvery).
func (q *Queue[Tx]) shouldNotify() bool {
	if q.cfg.NotifyEvery < 0 {
		return true
	}
	now, last := time.Now().UnixNano(), q.lastNotify.Load()
	return now-last >= int64(q.cfg.NotifyEvery) && q.lastNotify.CompareAndSwap(last, now)
}

// wakeLocal wakes this process's Sources of q.
func (q *Queue[Tx]) wakeLocal() {
	q.mu.Lock()
	close(q.kick)
	q.kick = make(chan struct{})
	q.mu.Unlock()
}

// woken returns the channel the next InsertTx closes.
func (q *Queue[Tx]) woken() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.kick
}

// ErrNotUnfinished is returned by Cancel for a topic and ID with no unfinished
// message: never enqueued, finished already (applied, dead-lettered,
// cancelled), or swept. It matches idem.ErrNotFound.
var ErrNotUnfinished error = &idem.NotFoundError{Msg: "queue: no unfinished message with this topic and id"}

// Cancel finishes the unfinished message of topic and id, waiting or running,
// with outcome "cancelled" and reason: it will not run. A running one whose
// effect has not committed yet cannot commit it: its consumer's transaction
// fails to retire it and rolls back. Cancel returns ErrNotUnfinished when
// there is no such message.
func (q *Queue[Tx]) Cancel(ctx context.Context, topic, id, reason string) error {
	return q.db.InTx(ctx, func(tx Tx) error { return q.CancelTx(ctx, tx, topic, id, reason) })
}

// CancelTx is Cancel in the caller's transaction: the message is cancelled if
// and only if tx commits.
func (q *Queue[Tx]) CancelTx(ctx context.Context, tx Tx, topic, id, reason string) error {
	switch {
	case topic == "":
		return &idem.InputError{Field: "topic", Reason: "is empty", Fix: "name the topic the message was enqueued to"}
	case id == "":
		return &idem.InputError{Field: "id", Reason: "is empty", Fix: "pass the message's ID, as EnqueueTx returned it"}
	}
	n, err := q.db.Querier(tx).Exec(ctx, q.stmts.Cancel, q.cfg.Now().UnixMilli(), fitReason(reason), topic, id)
	if err != nil {
		return &idem.BackendError{Backend: q.db.Dialect().String(), Op: "queue.cancel", Err: err}
	}
	if n == 0 {
		return ErrNotUnfinished
	}
	return nil
}

// maxReason bounds a recorded reason or error, in bytes.
const maxReason = 2000

func fitReason(s string) string { return sqltext.Fit(s, maxReason) }
