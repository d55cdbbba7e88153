package idemkafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/internal/wait"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TransformFunc maps one consumed record to the records to produce for it: none,
// one or several, to any topics. It runs inside the record's transaction, so its
// outputs become visible to read_committed consumers if and only if the record's
// offset is committed with them. It must return new records (not in, whose
// fields the consumer still uses) and may copy in's key, value and headers.
//
// An error aborts the transaction: its outputs are discarded and the batch is
// consumed again after a backoff. An error marked with idem.Permanent goes to
// TransformConfig.DeadLetterTopic if one is set, or else stops Run. The handler
// must have no effect outside Kafka: an effect on a database or an API is not
// part of the transaction and would be repeated on every retry (use the inbox
// for those).
type TransformFunc func(ctx context.Context, in *kgo.Record) ([]*kgo.Record, error)

// ErrFenced is returned by Run when the transaction coordinator fenced this
// instance's producer: another instance started with the same TransactionalID,
// which is how a restarted instance stops the one it replaces (a "zombie" that
// was only paused or cut off). The fenced instance's open transaction is
// aborted by the broker and it must not go on.
var ErrFenced = errors.New("idemkafka: the transactional ID was taken over by another instance (a restart of this one, or a second instance with the same TransactionalID); this instance's open transaction is aborted and it stopped")

// HeaderError is the header of a dead-lettered record that holds the handler's
// error (its first 1,024 bytes).
const HeaderError = "Idem-Error"

// HeaderSource is the header of a dead-lettered record naming where it was
// consumed: "topic/partition/offset".
const HeaderSource = "Idem-Source"

// errCrashed ends a worker that the test hook crashed in the middle of a transaction.
var errCrashed = errors.New("idemkafka: worker crashed by test hook")

// Transform is a read-process-write pipeline with Kafka's exactly-once semantics:
// each batch of consumed records, the records its handler produces and the
// group's new offsets are committed in one Kafka transaction, or none of them is.
// Readers of the output topics with isolation level read_committed see every
// consumed record's outputs exactly once, across crashes, rebalances and
// restarts. See the package doc, "Read-process-write transactions".
type Transform struct {
	cfg     TransformConfig
	fn      TransformFunc
	tracer  otelx.Tracer
	metrics *transformMetrics
	running atomic.Bool

	committed atomic.Int64 // consumed records of committed transactions

	// beforeEnd, set by tests only, runs after a batch's outputs are produced and
	// before its transaction ends; false crashes the worker there.
	beforeEnd func(worker int) bool
}

// NewTransform checks cfg and returns a Transform that runs fn on every consumed
// record. Nothing connects until Run.
func NewTransform(cfg TransformConfig, fn TransformFunc) (*Transform, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, &idem.InputError{Field: "fn", Reason: "is nil", Fix: "pass the function that maps a consumed record to the records to produce"}
	}
	m, err := newTransformMetrics(cfg.Registerer, cfg.Group)
	if err != nil {
		return nil, &idem.InputError{Field: "TransformConfig.Registerer", Reason: "refused the metrics: " + err.Error(), Fix: "use a registry without conflicting idem_kafka_* collectors"}
	}
	return &Transform{cfg: cfg, fn: fn, tracer: otelx.New(cfg.TracerProvider, cfg.Propagator), metrics: m}, nil
}

// Committed returns how many consumed records this Transform has committed (in
// transactions whose commit it saw confirmed), since it was made. A transaction
// whose EndTxn reached the broker but whose answer was lost (the connection cut)
// may have committed without being counted here: the output topics, read with
// read_committed, are the truth.
func (t *Transform) Committed() int64 { return t.committed.Load() }

// Run joins the group with cfg.Workers transactional sessions and transforms
// records until ctx ends, then finishes the transactions in progress (bounded by
// TransactionTimeout), leaves the group and returns nil. It returns early with
// ErrFenced if another instance took over the transactional ID, with the error
// of a handler that failed permanently when there is no DeadLetterTopic, or
// with an input error if the client options are refused. Run may be called once.
func (t *Transform) Run(ctx context.Context) error {
	if !t.running.CompareAndSwap(false, true) {
		return &idem.InputError{Field: "Transform.Run", Reason: "was called twice", Fix: "make one Transform per Run; a Transform is not restartable"}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for i := range t.cfg.Workers {
		wg.Go(func() {
			if err := t.work(ctx, i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				cancel(err) // one worker's fatal error stops the instance
			}
		})
	}
	wg.Wait()
	return first
}

// work runs worker i's sessions until ctx ends or a fatal error: a session whose
// producer failed otherwise is replaced by a new one after a backoff.
func (t *Transform) work(ctx context.Context, i int) error {
	txnID := t.cfg.TransactionalID + "-" + strconv.Itoa(i)
	delay := t.cfg.RetryDelay
	for {
		sess, err := t.session(txnID)
		if err != nil {
			return err
		}
		err = t.loop(ctx, i, sess, txnID)
		if errors.Is(err, errCrashed) {
			// A crash between produce and commit: the client goes away with its
			// transaction open, as a killed process's would.
			closeSession(sess)
			return err
		}
		closeSession(sess)
		switch {
		case ctx.Err() != nil:
			return nil
		case isFenced(err):
			return fmt.Errorf("%w (transactional ID %s): %v", ErrFenced, txnID, err)
		case idem.IsPermanent(err):
			return err
		}
		t.log("transactional session failed; replacing it", txnID, err)
		if !wait.Sleep(ctx, delay) {
			return nil
		}
		delay = min(2*delay, MaxRetryDelay)
	}
}

// session opens worker txnID's client: a group member fetching read_committed
// whose producer is transactional under txnID.
func (t *Transform) session(txnID string) (*kgo.GroupTransactSession, error) {
	// A transaction waits for its outputs before it ends, so lingering only adds
	// latency (10ms per transaction with franz-go's default); Options may override.
	opts := append([]kgo.Opt{kgo.SeedBrokers(t.cfg.Brokers...), kgo.ProducerLinger(0)}, t.cfg.Options...)
	opts = append(opts,
		kgo.ConsumerGroup(t.cfg.Group),
		kgo.ConsumeTopics(t.cfg.Topics...),
		kgo.DisableAutoCommit(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(t.cfg.TransactionTimeout),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchMaxBytes(maxRecordBatchBytes),
	)
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return nil, &idem.InputError{Field: "TransformConfig.Options", Reason: "are refused by franz-go: " + err.Error(), Fix: "fix or remove the offending option"}
	}
	return sess, nil
}

// loop consumes batches and transacts each until ctx ends or the session fails.
func (t *Transform) loop(ctx context.Context, worker int, sess *kgo.GroupTransactSession, txnID string) error {
	delay := t.cfg.RetryDelay
	for ctx.Err() == nil {
		fetches := sess.PollRecords(ctx, t.cfg.MaxBatch)
		if fetches.IsClientClosed() {
			return nil
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				t.log("fetch failed; franz-go retries it", txnID, fmt.Errorf("topic %s partition %d: %w", topic, partition, err))
			}
		})
		recs := fetches.Records()
		if len(recs) == 0 {
			continue
		}
		committed, err := t.transact(ctx, worker, sess, txnID, recs)
		switch {
		case committed:
			delay = t.cfg.RetryDelay
			continue
		case errors.Is(err, errCrashed), isFenced(err), idem.IsPermanent(err):
			return err
		case errors.Is(err, errEnd):
			return err
		}
		// Aborted: the session rewound to the committed offsets, so the next poll
		// returns the batch again (or, after a rebalance, what this member owns).
		t.log("transaction aborted; its records are consumed again", txnID, err)
		if !wait.Sleep(ctx, delay) {
			return nil
		}
		delay = min(2*delay, MaxRetryDelay)
	}
	return nil
}

// errEnd marks a failure to end a transaction, after which the session is replaced.
var errEnd = errors.New("ending the transaction failed")

// transact runs one transaction over recs and reports whether it committed. The
// handlers, the produce and the end run on a context detached from ctx, so a
// shutdown lets the batch finish, bounded by TransactionTimeout.
func (t *Transform) transact(ctx context.Context, worker int, sess *kgo.GroupTransactSession, txnID string, recs []*kgo.Record) (bool, error) {
	start := time.Now()
	txnCtx, span := t.startTxn(ctx, txnID, len(recs))
	hctx, cancel := context.WithTimeout(context.WithoutCancel(txnCtx), t.cfg.TransactionTimeout)
	defer cancel()
	if err := sess.Begin(); err != nil {
		err = fmt.Errorf("%w: begin: %w", errEnd, err)
		t.metrics.ended(outcomeFailed, start, len(recs), 0, 0)
		endTxn(span, outcomeFailed, 0, err)
		return false, err
	}
	outs, dead, herr := t.handle(hctx, txnCtx, recs)
	if herr == nil && len(outs) > 0 {
		if err := produce(hctx, sess, outs); err != nil {
			herr = &idem.BackendError{Backend: backend, Op: "produce", Err: err}
		}
	}
	if t.beforeEnd != nil && !t.beforeEnd(worker) {
		span.End()
		return false, errCrashed
	}
	ectx, cancelEnd := context.WithTimeout(context.WithoutCancel(ctx), t.cfg.TransactionTimeout)
	defer cancelEnd()
	committed, err := sess.End(ectx, herr == nil)
	switch {
	case err != nil:
		err = fmt.Errorf("%w: %w", errEnd, err)
		if herr != nil {
			err = fmt.Errorf("%w (after %w)", err, herr)
		}
		t.metrics.ended(outcomeFailed, start, len(recs), 0, 0)
		endTxn(span, outcomeFailed, len(outs), err)
		return false, err
	case committed:
		t.committed.Add(int64(len(recs)))
		t.metrics.ended(outcomeCommitted, start, len(recs), len(outs)-dead, dead)
		endTxn(span, outcomeCommitted, len(outs), nil)
		return true, nil
	}
	if herr == nil {
		herr = errors.New("the group rebalanced before the commit")
	}
	t.metrics.ended(outcomeAborted, start, len(recs), 0, 0)
	endTxn(span, outcomeAborted, len(outs), herr)
	return false, herr
}

// produce produces outs and waits for every result, or until ctx ends: franz-go
// waits for records already sent whatever their context says, and a partition
// whose producer is stuck (a coordinator that does not answer) must not hold the
// worker past its transaction's timeout.
func produce(ctx context.Context, sess *kgo.GroupTransactSession, outs []*kgo.Record) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	wg.Add(len(outs))
	for _, r := range outs {
		sess.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
			wg.Done()
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("outputs not acknowledged within the transaction timeout: %w", ctx.Err())
	}
	mu.Lock()
	defer mu.Unlock()
	return first
}

// closeSession leaves the group within a bound, then closes the client: a session
// whose connections are gone must not hold Run past its context.
func closeSession(sess *kgo.GroupTransactSession) {
	ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
	defer cancel()
	_ = sess.Client().LeaveGroupContext(ctx)
	sess.Close()
}

// handle runs the handler on each record and returns every output, how many of
// them are dead letters, and the first error that aborts the transaction.
func (t *Transform) handle(ctx, txnCtx context.Context, recs []*kgo.Record) (outs []*kgo.Record, dead int, err error) {
	for _, r := range recs {
		rctx, span := t.startRecord(ctx, txnCtx, r)
		o, herr := t.fn(rctx, r)
		if herr != nil {
			if !idem.IsPermanent(herr) || t.cfg.DeadLetterTopic == "" {
				otelx.Fail(span, herr)
				span.End()
				return nil, 0, fmt.Errorf("handler failed on topic %s partition %d offset %d: %w", r.Topic, r.Partition, r.Offset, herr)
			}
			o, dead = []*kgo.Record{t.deadLetter(r, herr)}, dead+1
		}
		for _, out := range o {
			if out == nil {
				continue
			}
			if out.Topic == "" {
				span.End()
				return nil, 0, idem.Permanent(&idem.InputError{Field: "TransformFunc result", Reason: fmt.Sprintf("has a record without a topic (for topic %s partition %d offset %d)", r.Topic, r.Partition, r.Offset),
					Fix: "set Topic on every record the handler returns"})
			}
			t.inject(rctx, out)
			outs = append(outs, out)
		}
		span.End()
	}
	return outs, dead, nil
}

// deadLetter is r for DeadLetterTopic, with the error and its origin in headers.
func (t *Transform) deadLetter(r *kgo.Record, err error) *kgo.Record {
	msg := err.Error()
	if len(msg) > 1024 {
		msg = msg[:1024]
	}
	h := append(make([]kgo.RecordHeader, 0, len(r.Headers)+2), r.Headers...)
	h = append(h, kgo.RecordHeader{Key: HeaderError, Value: []byte(msg)},
		kgo.RecordHeader{Key: HeaderSource, Value: fmt.Appendf(nil, "%s/%d/%d", r.Topic, r.Partition, r.Offset)})
	return &kgo.Record{Topic: t.cfg.DeadLetterTopic, Key: r.Key, Value: r.Value, Headers: h}
}

// isFenced reports whether err means another producer took over the transactional ID.
func isFenced(err error) bool {
	return errors.Is(err, ErrFenced) || errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch)
}

func (t *Transform) log(msg, txnID string, err error) {
	if t.cfg.Logger != nil {
		t.cfg.Logger.Warn("idemkafka: "+msg, slog.String("group", t.cfg.Group), slog.String("transactional_id", txnID), slog.Any("err", err))
	}
}
