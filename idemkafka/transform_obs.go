package idemkafka

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem/internal/metrics"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Span names and attributes of a Transform.
const (
	SpanTransaction = "idem.kafka.transaction" // one transaction: consume, transform, produce, commit
	SpanTransform   = "idem.kafka.transform"   // one consumed record through the handler

	keyTxnOutcome = attribute.Key("idem.kafka.transaction.outcome") // committed, aborted, failed
	keyTxnRecords = attribute.Key("idem.kafka.transaction.records")
	keyTxnOutputs = attribute.Key("idem.kafka.transaction.outputs")
	keyTxnID      = attribute.Key("idem.kafka.transactional_id")
)

// Transaction outcomes, the outcome label of idem_kafka_transactions_total.
const (
	outcomeCommitted = "committed" // offsets and outputs are visible
	outcomeAborted   = "aborted"   // a handler or produce error, a rebalance: the batch is redone
	outcomeFailed    = "failed"    // ending the transaction failed: the session is replaced (or fenced)
)

// transformMetrics are a Transform's collectors; nil records nothing.
type transformMetrics struct {
	txns    *prometheus.CounterVec
	records *prometheus.CounterVec
	latency prometheus.Observer
	group   string
}

func newTransformMetrics(reg prometheus.Registerer, group string) (*transformMetrics, error) {
	if reg == nil {
		return nil, nil
	}
	txns, err := metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_kafka_transactions_total",
		Help: "Kafka read-process-write transactions ended by idemkafka.Transform, by outcome (committed, aborted, failed).",
	}, []string{"group", "outcome"}))
	if err != nil {
		return nil, err
	}
	records, err := metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_kafka_transform_records_total",
		Help: "Records of committed Kafka transactions, by kind (consumed, produced, dead_lettered).",
	}, []string{"group", "kind"}))
	if err != nil {
		return nil, err
	}
	latency, err := metrics.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "idem_kafka_transaction_duration_seconds",
		Help:    "Time from the first record of a transaction to its end: handlers, produce, offset commit and EndTxn.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
	}, []string{"group"}))
	if err != nil {
		return nil, err
	}
	return &transformMetrics{txns: txns, records: records, latency: latency.WithLabelValues(group), group: group}, nil
}

// ended records one transaction that started at start.
func (m *transformMetrics) ended(outcome string, start time.Time, consumed, produced, dead int) {
	if m == nil {
		return
	}
	m.latency.Observe(time.Since(start).Seconds())
	m.txns.WithLabelValues(m.group, outcome).Inc()
	if outcome != outcomeCommitted {
		return
	}
	m.records.WithLabelValues(m.group, "consumed").Add(float64(consumed))
	m.records.WithLabelValues(m.group, "produced").Add(float64(produced))
	if dead > 0 {
		m.records.WithLabelValues(m.group, "dead_lettered").Add(float64(dead))
	}
}

// startTxn starts a transaction's span, or returns ctx and otelx.NoSpan when
// tracing is off.
func (t *Transform) startTxn(ctx context.Context, txnID string, n int) (context.Context, trace.Span) {
	if t.tracer.Off() {
		return ctx, otelx.NoSpan
	}
	ctx, span := t.tracer.Start(ctx, SpanTransaction, otelx.KindInternal...)
	if span.IsRecording() {
		span.SetAttributes(otelx.KeyMessagingSystem.String("kafka"), otelx.KeyMessagingConsumer.String(t.cfg.Group),
			keyTxnID.String(txnID), keyTxnRecords.Int(n))
	}
	return ctx, span
}

// endTxn ends a transaction's span with its outcome.
func endTxn(span trace.Span, outcome string, outputs int, err error) {
	if span.IsRecording() {
		span.SetAttributes(keyTxnOutcome.String(outcome), keyTxnOutputs.Int(outputs))
		otelx.Fail(span, err)
	}
	span.End()
}

// startRecord starts the span of one consumed record under ctx: a child of the
// trace its headers carry (else of ctx's span), linked to the transaction's span
// in txnCtx.
func (t *Transform) startRecord(ctx, txnCtx context.Context, r *kgo.Record) (context.Context, trace.Span) {
	if t.tracer.Off() {
		return ctx, otelx.NoSpan
	}
	ctx = t.tracer.Propagator().Extract(ctx, headerCarrier{&r.Headers})
	ctx, span := t.tracer.Start(ctx, SpanTransform, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithLinks(trace.LinkFromContext(txnCtx)))
	if span.IsRecording() {
		span.SetAttributes(otelx.KeyMessagingSystem.String("kafka"), otelx.KeyMessagingOp.String("process"),
			otelx.KeyMessagingDest.String(r.Topic), otelx.KeyMessagingConsumer.String(t.cfg.Group),
			otelx.KeyMessagingPartition.String(strconv.FormatInt(int64(r.Partition), 10)), otelx.KeyMessagingOffset.Int64(r.Offset))
	}
	return ctx, span
}

// inject writes ctx's trace context into the headers of out, replacing any the
// handler copied from the input, so the output continues the record's trace.
func (t *Transform) inject(ctx context.Context, out *kgo.Record) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	t.tracer.Propagator().Inject(ctx, headerCarrier{&out.Headers})
}

// headerCarrier is a record's headers as a propagation carrier: names match
// without regard to case, and Set replaces every header of the name.
type headerCarrier struct{ h *[]kgo.RecordHeader }

func (c headerCarrier) Get(key string) string {
	for i := len(*c.h) - 1; i >= 0; i-- { // the last of a repeated header wins, as in fromRecord
		if strings.EqualFold((*c.h)[i].Key, key) {
			return string((*c.h)[i].Value)
		}
	}
	return ""
}

func (c headerCarrier) Set(key, value string) {
	kept := (*c.h)[:0:0]
	for _, h := range *c.h {
		if !strings.EqualFold(h.Key, key) {
			kept = append(kept, h)
		}
	}
	*c.h = append(kept, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

func (c headerCarrier) Keys() []string {
	out := make([]string, len(*c.h))
	for i, h := range *c.h {
		out[i] = h.Key
	}
	return out
}
