// Package otelx holds idem's OpenTelemetry conventions: the tracer name, the span
// names and attribute keys every component uses, and the helpers that put a trace
// context into, and take it out of, a message's headers.
//
// It is internal: applications see the conventions as strings in their tracing
// backend (documented in each component's package doc) and configure tracing through
// the TracerProvider and Propagator fields of each component's Config; the helpers
// stay free to change. The stores share one implementation, StoreTracer.
//
// Nothing here installs a provider or a propagator: a nil one means the global one
// (otel.GetTracerProvider, otel.GetTextMapPropagator), resolved once, when the
// component is built; the global ones delegate to whatever the application sets
// later. While no span can record (Off: the global provider unset, or a no-op one)
// components start no span at all and only pass on the trace context they were
// given; on a span that does not record (sampled out) the helpers build no
// attributes (they check Span.IsRecording first).
package otelx

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/idemhq/idem"
)

// TracerName is the instrumentation scope of every idem span.
const TracerName = "github.com/idemhq/idem"

// Span names, one per boundary step.
const (
	SpanHTTPServer    = "idem.http.request"    // idemhttp middleware, one keyed request
	SpanHTTPClient    = "idem.http.attempt"    // idemhttp.Transport, one attempt
	SpanOutboxEnqueue = "idem.outbox.enqueue"  // outbox.EnqueueTx, one call
	SpanQueueEnqueue  = "idem.queue.enqueue"   // queue.InsertTx, one call
	SpanRelayPublish  = "idem.outbox.publish"  // outbox relay, one message published
	SpanInboxProcess  = "idem.inbox.process"   // inbox, one delivery: claim, apply, ack
	SpanInboxApply    = "idem.inbox.apply"     // inbox, the handler of a new message
	SpanInboxSuppress = "idem.inbox.duplicate" // inbox, a redelivery found applied
)

// Attribute keys of idem's own vocabulary.
const (
	KeyScope     = attribute.Key("idem.scope")
	KeyKey       = attribute.Key("idem.key")
	KeyOutcome   = attribute.Key("idem.outcome") // acquired, replayed, in_progress, mismatch
	KeyToken     = attribute.Key("idem.token")
	KeyAttempt   = attribute.Key("idem.attempt")
	KeyDuplicate = attribute.Key("idem.duplicate") // true when a duplicate was suppressed
	// KeyLinkAppliedBy marks a duplicate's link to the span of the delivery that applied it.
	KeyLinkAppliedBy = attribute.Key("idem.applied_by")
	// KeyVerdict is what the inbox did with a delivery: processed, duplicate,
	// retried or dead_lettered.
	KeyVerdict = attribute.Key("idem.inbox.verdict")
	// KeyOutboxPartition is the outbox's own ordering partition (0–63), not a
	// broker's partition.
	KeyOutboxPartition = attribute.Key("idem.outbox.partition")
	// KeyPosition is a delivery's place in its broker as the adapter reports it
	// ("stream seq 42", "partition 3 offset 1017", a Redis entry id).
	KeyPosition = attribute.Key("idem.position")
)

// Messaging keys of the OpenTelemetry semantic conventions.
const (
	KeyMessagingSystem    = semconv.MessagingSystemKey
	KeyMessagingDest      = semconv.MessagingDestinationNameKey
	KeyMessagingPartition = semconv.MessagingDestinationPartitionIDKey
	KeyMessagingOffset    = semconv.MessagingKafkaOffsetKey
	// KeyRabbitMQDeliveryTag is a RabbitMQ delivery's tag on its channel.
	KeyRabbitMQDeliveryTag = semconv.MessagingRabbitMQMessageDeliveryTagKey
	KeyMessagingID         = semconv.MessagingMessageIDKey
	KeyMessagingOp         = semconv.MessagingOperationTypeKey
	KeyMessagingConsumer   = semconv.MessagingConsumerGroupNameKey
)

// Span start options built once, so passing them allocates nothing.
var (
	KindServer   = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	KindInternal = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
	KindClient   = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
	KindProducer = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}
)

// Tracer is a component's tracer and propagator. The zero value is not usable; use New.
type Tracer struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	global bool // follows the global provider: Off asks it each time
	noop   bool // a provider whose spans never record
}

// New returns the Tracer of tp and prop; nil means the global one.
func New(tp trace.TracerProvider, prop propagation.TextMapPropagator) Tracer {
	t := Tracer{prop: prop}
	if tp == nil || (unsetGlobal != nil && tp == unsetGlobal) {
		t.global, tp = true, otel.GetTracerProvider()
	}
	_, t.noop = tp.(noop.TracerProvider)
	if prop == nil {
		t.prop = otel.GetTextMapPropagator()
	}
	t.tracer = tp.Tracer(TracerName)
	return t
}

// Off reports whether no span of tp (nil: the global provider) can record now, as
// Tracer.Off does, without making a Tracer: for calls that build their
// configuration each time (idemhttp.Transport).
func Off(tp trace.TracerProvider) bool {
	if tp == nil || (unsetGlobal != nil && tp == unsetGlobal) {
		return unsetGlobal != nil && otel.GetTracerProvider() == unsetGlobal
	}
	_, ok := tp.(noop.TracerProvider)
	return ok
}

// Propagator returns prop, or the global propagator when prop is nil.
func Propagator(prop propagation.TextMapPropagator) propagation.TextMapPropagator {
	if prop == nil {
		return otel.GetTextMapPropagator()
	}
	return prop
}

// unsetGlobal is the global TracerProvider before the application sets one:
// OpenTelemetry's delegating provider, whose spans never record. Nil if a provider
// was set before this package was initialized.
var unsetGlobal = func() trace.TracerProvider {
	tp := otel.GetTracerProvider()
	if fmt.Sprintf("%T", tp) != "*global.tracerProvider" {
		return nil
	}
	return tp
}()

// Off reports whether no span can record now: the provider is a no-op, or the global
// one that the application has not set (yet). Components then start no span at all,
// so tracing costs nothing when unused, and only propagate the trace context they
// were given (as a no-op provider's spans would). Checked per call, so a global
// provider set later takes effect. (OpenTelemetry's eBPF auto-instrumentation, which
// records spans of the unset global provider, is not seen: set a provider.)
func (t Tracer) Off() bool {
	if t.global {
		return unsetGlobal != nil && otel.GetTracerProvider() == unsetGlobal
	}
	return t.noop
}

// NoSpan is the span of a step not traced (see Off): ending it does nothing.
var NoSpan = trace.SpanFromContext(context.Background())

// Start starts a span named name as a child of ctx's span.
func (t Tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, name, opts...)
}

// Propagator returns the propagator.
func (t Tracer) Propagator() propagation.TextMapPropagator { return t.prop }

// Extract returns ctx with the remote span context found in headers, if any.
func (t Tracer) Extract(ctx context.Context, headers map[string]string) context.Context {
	if len(headers) == 0 {
		return ctx
	}
	return t.prop.Extract(ctx, Carrier(headers))
}

// Inject returns headers with ctx's trace context added under the propagator's
// header names (traceparent, tracestate for W3C). When ctx carries no valid span
// context, or the propagator adds nothing, headers is returned as it is; otherwise
// the result is a copy, so the caller's map is never written.
func (t Tracer) Inject(ctx context.Context, headers map[string]string) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return headers
	}
	var add propagation.MapCarrier
	t.prop.Inject(ctx, (*lazyCarrier)(&add))
	if len(add) == 0 {
		return headers
	}
	out := make(map[string]string, len(headers)+len(add))
	for k, v := range headers {
		if _, ok := Carrier(add).lookup(k); !ok { // a stale trace header of another case
			out[k] = v
		}
	}
	for k, v := range add {
		out[k] = v
	}
	return out
}

// lazyCarrier is a MapCarrier made on the first Set.
type lazyCarrier propagation.MapCarrier

func (c *lazyCarrier) Get(k string) string { return (*c)[k] }
func (c *lazyCarrier) Set(k, v string) {
	if *c == nil {
		*c = make(lazyCarrier, 2)
	}
	(*c)[k] = v
}
func (c *lazyCarrier) Keys() []string { return propagation.MapCarrier(*c).Keys() }

// Carrier is a message's headers as a propagation carrier. Get matches names without
// regard to case, since brokers and producers differ (HTTP canonicalizes
// "Traceparent").
type Carrier map[string]string

// Get returns the value of key, matched exactly, else without regard to case.
func (c Carrier) Get(key string) string {
	v, _ := c.lookup(key)
	return v
}

func (c Carrier) lookup(key string) (string, bool) {
	if v, ok := c[key]; ok {
		return v, true
	}
	for k, v := range c {
		if strings.EqualFold(k, key) {
			return v, true
		}
	}
	return "", false
}

// Set sets key.
func (c Carrier) Set(key, value string) { c[key] = value }

// Keys returns the header names.
func (c Carrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}

// Outcome is the idem.outcome attribute of o.
func Outcome(o idem.Outcome) attribute.KeyValue { return KeyOutcome.String(o.String()) }

// SetKey sets idem.scope and idem.key on span, if it is recording.
func SetKey(span trace.Span, k idem.Key) {
	if span.IsRecording() {
		span.SetAttributes(KeyScope.String(k.Scope), KeyKey.String(k.ID))
	}
}

// SetOutcome sets idem.outcome (and idem.token when acquired) on span, if it is
// recording.
func SetOutcome(span trace.Span, o idem.Outcome, token uint64) {
	if !span.IsRecording() {
		return
	}
	if o == idem.Acquired {
		span.SetAttributes(Outcome(o), KeyToken.Int64(int64(token)))
		return
	}
	span.SetAttributes(Outcome(o))
}

// Fail records err on span and marks it failed, if it is recording.
func Fail(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}

// MessageAttrs sets the messaging attributes of m on span, if it is recording:
// system (when known), destination, message id, the delivery's position as the
// adapter reports it (idem.position), and the semantic conventions' position
// attributes where the conventions define them: partition and offset for Kafka, the
// delivery tag for RabbitMQ. NATS (stream sequence) and Redis Streams (entry id)
// have none; idem.position carries theirs.
func MessageAttrs(span trace.Span, system, op string, m idem.Message, position string) {
	if !span.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 7)
	if system != "" {
		attrs = append(attrs, KeyMessagingSystem.String(system))
	}
	attrs = append(attrs, KeyMessagingOp.String(op), KeyMessagingDest.String(m.Topic), KeyMessagingID.String(m.ID))
	if position != "" {
		attrs = append(attrs, KeyPosition.String(position))
		if part, off, ok := kafkaPosition(position); ok {
			attrs = append(attrs, KeyMessagingPartition.String(part), KeyMessagingOffset.Int64(off))
		} else if tag, ok := amqpDeliveryTag(position); ok {
			attrs = append(attrs, KeyRabbitMQDeliveryTag.Int64(tag))
		}
	}
	span.SetAttributes(attrs...)
}

// kafkaPosition parses idemkafka's "partition P offset O".
func kafkaPosition(pos string) (string, int64, bool) {
	rest, ok := strings.CutPrefix(pos, "partition ")
	if !ok {
		return "", 0, false
	}
	part, off, ok := strings.Cut(rest, " offset ")
	if !ok {
		return "", 0, false
	}
	if _, err := strconv.ParseUint(part, 10, 31); err != nil {
		return "", 0, false
	}
	o, err := strconv.ParseInt(off, 10, 64)
	if err != nil || o < 0 {
		return "", 0, false
	}
	return part, o, true
}

// amqpDeliveryTag parses idemamqp's "queue Q delivery tag N".
func amqpDeliveryTag(pos string) (int64, bool) {
	if !strings.HasPrefix(pos, "queue ") {
		return 0, false
	}
	i := strings.LastIndex(pos, " delivery tag ")
	if i < 0 {
		return 0, false
	}
	tag, err := strconv.ParseInt(pos[i+len(" delivery tag "):], 10, 64)
	if err != nil || tag < 0 {
		return 0, false
	}
	return tag, true
}

// System returns the messaging.system of a Sink or Source that reports one
// (MessagingSystem() string: "nats", "kafka", "redis", "rabbitmq"), else "".
func System(v any) string {
	if s, ok := v.(interface{ MessagingSystem() string }); ok {
		return s.MessagingSystem()
	}
	return ""
}
