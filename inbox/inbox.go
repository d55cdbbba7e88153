package inbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/metrics"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/internal/sqltext"
	"github.com/idemhq/idem/internal/wait"
	"github.com/idemhq/idem/migrate"
)

// Handler applies one message's effect inside tx, the transaction in which the
// message's key is recorded. It must do all its writes through tx and nothing outside
// it that cannot be undone (see package effect for calls to other systems). A nil error
// commits the effect with the key; an error rolls both back and the message is
// redelivered, unless it is marked Permanent, which dead-letters it.
type Handler[Tx any] func(ctx context.Context, tx Tx, m idem.Message) error

// Consumer is an idempotent consumer: it receives from a Source and applies each
// message's effect exactly once by recording the message key in the effect's
// transaction. Create it with New and start it with Run.
type Consumer[Tx any] struct {
	src      idem.Source
	txs      TxSource[Tx] // src, when its messages live in db: settled in the effect's transaction
	db       idemsql.TxDB[Tx]
	sql      *idemsql.InboxSQL // db's statements for dead letters and replays
	store    idem.TxStore[Tx]
	recorder idem.TxRecorder[Tx]       // store's one-statement batch path, if it has one
	results  idem.TxResultRecorder[Tx] // the same, able to record who applied a key (tracing)
	inspect  idem.Inspector            // store's records, read for a traced duplicate's link
	handle   Handler[Tx]
	batch    BatchHandler[Tx] // NewBatch's, for a batch's fast path; handle then calls it with one message
	cfg      Config
	metrics  *metrics.Inbox
	seqs     SeqTracker[Tx] // with seqOf, set by WithSequences
	seqOf    SeqFunc
	oneByOne bool // WithLSN: one message per transaction
	tr       otelx.Tracer
	sys      string // the source's messaging.system, "" if it does not say

	recount chan struct{} // deadLettersChanged's requests to watchGauges

	mu       sync.Mutex
	failures map[string]*failure // by message key: counts for brokers that do not count
}

// failure is what the consumer remembers of a message whose handler failed.
type failure struct {
	attempts int
	first    time.Time
	last     string
}

// New returns a consumer of src that runs handle in transactions of db, recording
// keys in store, which must keep its records in db's database (idempg.Store for
// pgx, idempg.SQLStore or idemsqlite.Store for database/sql). It creates the
// dead-letter table idem_dead_letters if missing.
func New[Tx any](ctx context.Context, src idem.Source, db idemsql.TxDB[Tx], store idem.TxStore[Tx], handle Handler[Tx], cfg Config,
	opts ...Option[Tx]) (*Consumer[Tx], error) {
	batch := cfg.BatchSize // as asked, before defaults
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	switch {
	case src == nil:
		return nil, &idem.InputError{Field: "src", Reason: "is nil", Fix: "pass a broker Source (idemnats, idemkafka, idemredis, idemamqp)"}
	case store == nil:
		return nil, &idem.InputError{Field: "store", Reason: "is nil", Fix: "pass the TxStore of db's database"}
	case handle == nil:
		return nil, &idem.InputError{Field: "handle", Reason: "is nil", Fix: "pass the function that applies a message"}
	}
	if err := db.Validate(); err != nil {
		return nil, err
	}
	m, err := metrics.NewInbox(cfg.Registerer, cfg.Consumer)
	if err != nil {
		return nil, err
	}
	c := &Consumer[Tx]{src: src, db: db, sql: db.Driver.Inbox(), store: store, handle: handle, cfg: cfg, metrics: m, failures: map[string]*failure{}, recount: make(chan struct{}, 1),
		tr: otelx.New(cfg.TracerProvider, cfg.Propagator), sys: otelx.System(src)}
	c.recorder, _ = store.(idem.TxRecorder[Tx])
	c.results, _ = store.(idem.TxResultRecorder[Tx])
	c.inspect, _ = store.(idem.Inspector)
	if ts, ok := src.(TxSource[Tx]); ok && ts.Database().SameHandle(db) {
		c.txs = ts
	}
	for _, o := range opts {
		o(c)
	}
	if c.oneByOne {
		if batch > 1 {
			return nil, &idem.InputError{Field: "Config.BatchSize", Reason: fmt.Sprintf("is %d with WithLSN", batch),
				Fix: "leave it 0 or set 1: a watermark needs a source's messages applied in order, and a batch retried in part applies them out of order"}
		}
		c.cfg.BatchSize = 1
	}
	if err := migrate.Ensure(ctx, db, cfg.SkipMigrate, migrate.Inbox); err != nil {
		return nil, err
	}
	return c, nil
}

// Run receives and processes batches until ctx ends, then returns ctx's error.
// Meanwhile it performs the replays operators request (ReplayRequested), every
// Config.ReplayPollInterval, and with a Config.Registerer keeps the gauges of open
// dead letters and of the source's lag, every Config.GaugeInterval. A
// source error that is not retryable (a closed source, bad configuration) ends Run
// with that error; retryable ones (a broker restarting) are retried with backoff.
//
// The acks of one batch are sent while the next batch is processed (never before its
// own commit), so a broker that confirms each ack does not hold the database idle.
func (c *Consumer[Tx]) Run(ctx context.Context) error {
	bctx, stop := context.WithCancel(ctx) // of the loops beside the receiving one
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	if c.cfg.ReplayPollInterval > 0 {
		wg.Go(func() { c.pollReplays(bctx) })
	}
	if c.cfg.GaugeInterval > 0 && c.metrics != nil {
		wg.Go(func() { c.watchGauges(bctx) })
	}
	failures := 0
	var settling chan struct{} // closed when the previous batch is settled
	defer func() {
		if settling != nil {
			<-settling
		}
	}()
	for {
		ds, err := c.src.Receive(ctx, c.cfg.BatchSize)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			if !idem.IsRetryable(err) || errors.Is(err, idem.ErrClosed) {
				return fmt.Errorf("inbox %s: receive: %w", c.cfg.Consumer, err)
			}
			failures++
			c.cfg.Logger.WarnContext(ctx, "inbox: receive failed; retrying", "consumer", c.cfg.Consumer, "err", err)
			if !wait.Sleep(ctx, c.cfg.Backoff(failures)) {
				return ctx.Err()
			}
			continue
		}
		failures = 0
		if len(ds) == 0 {
			continue
		}
		items := c.process(ctx, ds)
		if settling != nil {
			<-settling
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			sctx, cancel := settleContext(ctx)
			defer cancel()
			c.settle(sctx, items)
		}()
		settling = done
	}
}

// Permanent marks err as not worth retrying: the message goes to the dead-letter
// table at once (undecodable payload, a business rule that will never pass).
// It is idem.Permanent; Permanent(nil) is nil.
func Permanent(err error) error { return idem.Permanent(err) }

// PermanentError is an error marked by Permanent. It is idem.PermanentError, so
// errors marked by effect.Permanent are permanent here too.
type PermanentError = idem.PermanentError

// IsPermanent reports whether err, or an error it wraps, was marked by Permanent
// (this package's, effect's or idem's).
func IsPermanent(err error) bool { return idem.IsPermanent(err) }

// failed records a failed attempt of key and returns how many there were, taking the
// broker's count when it has one.
func (c *Consumer[Tx]) failed(key string, brokerAttempt int, err error) *failure {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.failures[key]
	if f == nil {
		f = &failure{first: time.Now()}
		c.failures[key] = f
	}
	f.attempts = max(f.attempts+1, brokerAttempt)
	f.last = sqltext.Fit(err.Error(), maxDeadReason) // kept in memory until the key succeeds or dies
	return f
}

// attemptsSoFar returns the failures recorded for key, or the broker's count of
// earlier deliveries when larger.
func (c *Consumer[Tx]) attemptsSoFar(key string, brokerAttempt int) (int, *failure) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.failures[key]
	n := max(brokerAttempt-1, 0)
	if f != nil {
		n = max(n, f.attempts)
	}
	return n, f
}

func (c *Consumer[Tx]) forget(key string) {
	c.mu.Lock()
	delete(c.failures, key)
	c.mu.Unlock()
}
