package otelx

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/storekit"
)

// Span names of the stores: one span per call, whatever the backend.
const (
	SpanStoreClaim    = "idem.store.claim"       // Claim or ClaimTx, one key
	SpanStoreBatch    = "idem.store.claim_batch" // ClaimBatch, one span for the batch
	SpanStoreComplete = "idem.store.complete"    // Complete or CompleteTx
	SpanStoreRelease  = "idem.store.release"     // Release or ReleaseTx
	SpanStoreRenew    = "idem.store.renew"       // Renew: a holder extends its lease
	SpanStoreRecord   = "idem.store.record"      // RecordTx: keys recorded as completed, one span per call
)

// Attribute keys of the stores.
const (
	// KeyDBSystem is the OpenTelemetry semantic convention's db.system.name:
	// sqlite, postgresql, mysql, redis, or memory (idemmem, not a convention value).
	KeyDBSystem = semconv.DBSystemNameKey
	// KeyBatchSize is the number of claims in a ClaimBatch.
	KeyBatchSize = attribute.Key("idem.batch.size")
	// KeyBatchDuplicates is how many claims of a batch found their key taken.
	KeyBatchDuplicates = attribute.Key("idem.batch.duplicates")
	// KeyTx is true on a span of a call made in the caller's transaction (ClaimTx…).
	KeyTx = attribute.Key("idem.tx")
)

// StoreTracer traces one store's calls. It is the one implementation the stores
// share: each store calls it where it counts its claims (internal/metrics), so the
// spans of every backend have the same names and attributes. While tracing is off
// (Tracer.Off) its methods return ctx and a nil span, which EndClaim, EndBatch
// and End accept (a nil check is cheaper than comparing interfaces with NoSpan):
// a store passes the span only to them.
type StoreTracer struct {
	tr     Tracer
	system attribute.KeyValue
	opts   []trace.SpanStartOption
}

// NewStoreTracer returns the tracer of a store of system (KeyDBSystem's value) on
// tp; nil tp means the global provider, followed as Tracer does.
func NewStoreTracer(tp trace.TracerProvider, system string) StoreTracer {
	opts := KindClient // a round trip to a database
	if system == "memory" {
		opts = KindInternal
	}
	return StoreTracer{tr: New(tp, nil), system: KeyDBSystem.String(system), opts: opts}
}

// Claim starts the span of one claim of k, a child of ctx's span; tx marks a
// claim made in the caller's transaction. End it with EndClaim.
func (s *StoreTracer) Claim(ctx context.Context, k idem.Key, tx bool) (context.Context, trace.Span) {
	if s.off() {
		return ctx, nil
	}
	return s.start(ctx, SpanStoreClaim, k, tx, 0, false)
}

// Op starts the span named name (SpanStoreComplete or SpanStoreRelease) of a
// call on k by the holder of token. End it with End.
func (s *StoreTracer) Op(ctx context.Context, name string, k idem.Key, token uint64, tx bool) (context.Context, trace.Span) {
	if s.off() {
		return ctx, nil
	}
	return s.start(ctx, name, k, tx, token, true)
}

// Finish runs do, the body of a Complete or Release (name: SpanStoreComplete or
// SpanStoreRelease) of k by the holder of token, in its span, once
// storekit.CheckFinish accepts the call: every store's Complete, Release and their
// Tx forms begin alike, so they begin here. tx marks a call in the caller's
// transaction.
func (s *StoreTracer) Finish(ctx context.Context, name string, k idem.Key, token uint64, tx bool,
	do func(ctx context.Context) error) (err error) {
	ctx, span := s.Op(ctx, name, k, token, tx)
	defer func() { End(span, err) }()
	if err := storekit.CheckFinish(ctx, k, token); err != nil {
		return err
	}
	return do(ctx)
}

// ClaimBatch runs do, the body of a ClaimBatch of claims, in its span, once
// storekit.CheckBatch accepts the claims; the span ends with do's results.
func (s *StoreTracer) ClaimBatch(ctx context.Context, claims []idem.Claim,
	do func(ctx context.Context) ([]idem.Result, error)) (out []idem.Result, err error) {
	ctx, span := s.Batch(ctx, claims)
	defer func() { EndBatch(span, out, err) }()
	if err := storekit.CheckBatch(ctx, claims); err != nil {
		return nil, err
	}
	return do(ctx)
}

// Renew runs do, the body of a Renew of k by the holder of token, with the lease
// storekit.CheckRenew accepts (a call it refuses starts no span), in a
// SpanStoreRenew span.
func (s *StoreTracer) Renew(ctx context.Context, k idem.Key, token uint64, lease time.Duration,
	do func(ctx context.Context, lease time.Duration) error) (err error) {
	lease, err = storekit.CheckRenew(ctx, k, token, lease)
	if err != nil {
		return err
	}
	ctx, span := s.Op(ctx, SpanStoreRenew, k, token, false)
	defer func() { End(span, err) }()
	return do(ctx, lease)
}

// off reports whether no span can record (or s is the zero value).
func (s *StoreTracer) off() bool { return s.tr.tracer == nil || s.tr.Off() }

func (s *StoreTracer) start(ctx context.Context, name string, k idem.Key, tx bool, token uint64, withToken bool) (context.Context, trace.Span) {
	ctx, span := s.tr.Start(ctx, name, s.opts...)
	if span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 5)
		attrs = append(attrs, s.system, KeyScope.String(k.Scope), KeyKey.String(k.ID))
		if withToken {
			attrs = append(attrs, KeyToken.Int64(int64(token)))
		}
		if tx {
			attrs = append(attrs, KeyTx.Bool(true))
		}
		span.SetAttributes(attrs...)
	}
	return ctx, span
}

// Batch starts the span of a ClaimBatch of claims. End it with EndBatch.
func (s *StoreTracer) Batch(ctx context.Context, claims []idem.Claim) (context.Context, trace.Span) {
	return s.batch(ctx, SpanStoreBatch, claims, false)
}

// Record starts the span of a RecordTx of claims, in the caller's transaction. End
// it with EndRecord.
func (s *StoreTracer) Record(ctx context.Context, claims []idem.Claim) (context.Context, trace.Span) {
	return s.batch(ctx, SpanStoreRecord, claims, true)
}

func (s *StoreTracer) batch(ctx context.Context, name string, claims []idem.Claim, tx bool) (context.Context, trace.Span) {
	if s.off() {
		return ctx, nil
	}
	ctx, span := s.tr.Start(ctx, name, s.opts...)
	if span.IsRecording() {
		span.SetAttributes(s.system, KeyBatchSize.Int(len(claims)))
		if tx {
			span.SetAttributes(KeyTx.Bool(true))
		}
		if len(claims) > 0 {
			span.SetAttributes(KeyScope.String(claims[0].Key.Scope))
		}
	}
	return ctx, span
}

// EndRecord ends a RecordTx's span with how many of its keys were duplicates, or
// its error.
func EndRecord(span trace.Span, out []idem.Outcome, err error) {
	endBatch(span, out, err, func(o idem.Outcome) idem.Outcome { return o })
}

// EndClaim ends a claim's span with its outcome (idem.outcome, idem.token when
// acquired, idem.duplicate when the key was taken) or its error.
func EndClaim(span trace.Span, res idem.Result, err error) {
	if span == nil {
		return // tracing is off: not even the closure
	}
	endWith(span, err, func(span trace.Span) {
		SetOutcome(span, res.Outcome, res.Token)
		if res.Outcome.Duplicate() {
			span.SetAttributes(KeyDuplicate.Bool(true))
		}
	})
}

// EndBatch ends a batch's span with how many of its claims were duplicates, or
// its error.
func EndBatch(span trace.Span, out []idem.Result, err error) {
	endBatch(span, out, err, func(r idem.Result) idem.Outcome { return r.Outcome })
}

func endBatch[T any](span trace.Span, out []T, err error, outcome func(T) idem.Outcome) {
	endWith(span, err, func(span trace.Span) {
		dups := 0
		for _, r := range out {
			if outcome(r).Duplicate() {
				dups++
			}
		}
		span.SetAttributes(KeyBatchDuplicates.Int(dups))
	})
}

// endWith ends span (nil while tracing is off): when it records, marked failed
// with err, or else with what done sets.
func endWith(span trace.Span, err error, done func(trace.Span)) {
	if span == nil {
		return
	}
	if span.IsRecording() {
		if err != nil {
			Fail(span, err)
		} else {
			done(span)
		}
	}
	span.End()
}

// End ends span, marking it failed with err, if any.
func End(span trace.Span, err error) {
	if span == nil {
		return
	}
	Fail(span, err)
	span.End()
}
