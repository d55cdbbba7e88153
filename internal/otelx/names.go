package otelx

import "go.opentelemetry.io/otel/attribute"

// Span names of the effect fence, sagas and streams.
const (
	SpanEffectDo        = "idem.effect.do"        // effect.Fence.Do, or one effect Recover takes over
	SpanEffectRecover   = "idem.effect.recover"   // effect.Fence.Recover, one sweep of a step
	SpanEffectReconcile = "idem.effect.reconcile" // Config.Reconcile asked after a takeover
	SpanSagaAdvance     = "idem.saga.advance"     // saga orchestrator, one saga advanced under its lease
	SpanSagaStep        = "idem.saga.step"        // one attempt of a step's action
	SpanSagaCompensate  = "idem.saga.compensate"  // one attempt of a step's compensation
	SpanStreamAppend    = "idem.stream.append"    // stream.Server.Append
	SpanStreamPush      = "idem.stream.push"      // one batch of events written to one client
)

// Attribute keys of the effect fence, sagas and streams.
const (
	// KeyStep is an effect's step ("charge"), or a saga step's name.
	KeyStep = attribute.Key("idem.step")
	// KeyDerivedKey is the idempotency key the fence sends downstream.
	KeyDerivedKey = attribute.Key("idem.derived_key")
	// KeyEffectOutcome is what the fence did: called, replayed, in_progress,
	// recovered, reconciled, fenced, failed or error (idem_effects_total's outcomes).
	KeyEffectOutcome = attribute.Key("idem.effect.outcome")
	// KeyTakeover is true when the fence took the effect over from a worker whose
	// lease expired (its call may have happened).
	KeyTakeover = attribute.Key("idem.effect.takeover")
	// KeyHappened is Reconcile's answer.
	KeyHappened = attribute.Key("idem.effect.happened")
	// KeyRecovered is how many effects one Recover completed.
	KeyRecovered = attribute.Key("idem.effect.recovered")
	// KeySagaID and KeySaga are a saga instance's id and its definition's name.
	KeySagaID = attribute.Key("idem.saga.id")
	KeySaga   = attribute.Key("idem.saga.name")
	// KeySagaState is the saga's state when its advance span ends.
	KeySagaState = attribute.Key("idem.saga.state")
	// KeyChannel, KeySeq and KeyEvents: a stream channel, an event's seq (the last
	// of a push), and the number of events a push wrote.
	KeyChannel  = attribute.Key("idem.stream.channel")
	KeySeq      = attribute.Key("idem.stream.seq")
	KeyFirstSeq = attribute.Key("idem.stream.first_seq")
	KeyEvents   = attribute.Key("idem.stream.events")
)
