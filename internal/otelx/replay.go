package otelx

import "go.opentelemetry.io/otel/attribute"

// SpanInboxReplay is the span of one replay of an inbox dead letter (Replay, or a
// replay an operator requested): a consumer span, child of the caller's span if
// any, linked to the trace context stored with the dead letter's message.
const SpanInboxReplay = "idem.inbox.replay"

// Attribute keys of a dead letter's replay.
const (
	// KeyDeadLetter is the dead letter's row id.
	KeyDeadLetter = attribute.Key("idem.inbox.dead_letter.id")
	// KeyReplayRequested is true for a replay an operator requested, performed by
	// the consumer's poll; false for a direct call of Replay.
	KeyReplayRequested = attribute.Key("idem.inbox.replay.requested")
	// KeyReplayResult is how the replay ended: applied (the handler ran and
	// committed), already_applied (the key had been applied meanwhile; the handler
	// did not run), gone (no open dead letter with this id), or failed.
	KeyReplayResult = attribute.Key("idem.inbox.replay.result")
)
