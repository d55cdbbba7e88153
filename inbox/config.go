package inbox

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
)

// Config configures a Consumer. Only Consumer is required.
type Config struct {
	// Consumer names the consumer: the scope of its message keys (two consumers of
	// one topic each apply every message once) and the owner of its dead letters.
	Consumer string
	// BatchSize is how many messages share one transaction, each under a savepoint
	// so one failure does not undo the others. 1 (the default) commits each message
	// alone; 32–256 multiplies throughput on a database that fsyncs each commit.
	BatchSize int
	// MaxAttempts is how many deliveries of one message may fail before it goes to
	// the dead-letter table. Default 10.
	MaxAttempts int
	// Backoff returns the redelivery delay after the attempt-th failure. Default:
	// 100 ms doubling per attempt, capped at 1 minute, with ±20% jitter.
	Backoff func(attempt int) time.Duration
	// TxRetryWindow is how long a batch whose transaction failed for the database,
	// the key store or the commit (a connection cut, a failover, a deadlock; not a
	// handler error) is kept and run again in process, waiting Backoff between
	// runs, before its messages are handed back to the broker. Meanwhile the
	// source is not read. The sources of idem's adapters keep the held messages
	// from redelivery meanwhile: JetStream, Redis Streams, Pub/Sub, SQS and the
	// database queue renew every unsettled delivery (up to their MaxExtension),
	// and Kafka and RabbitMQ redeliver only when the consumer leaves. Default 5 s;
	// at most 10 minutes; negative hands a failed batch back at once.
	TxRetryWindow time.Duration
	// Key returns the idempotency key of a message. Default: Message.ID, the broker's
	// message id. Derive it from the payload (an order id) when producers reuse no
	// ID across retries. An error dead-letters the message: it has no usable key.
	Key func(idem.Message) (string, error)
	// Retention is how long a processed key is remembered. Default 7 days; keep it
	// above the broker's redelivery horizon (JetStream max age, Kafka retention) and
	// the producers' retry horizon. A time-embedded key (UUIDv7, ULID) older than
	// MaxKeyAge is refused rather than applied again; any other key redelivered later
	// than Retention is applied again.
	Retention time.Duration
	// MaxKeyAge is how old a time-embedded key (UUIDv7, ULID: idemkey.Time) may be
	// when its message arrives. An older one is refused, not applied: its record may
	// have been forgotten, so it could be a late retry of a message applied already.
	// Such a message is acked and dead-lettered with kind "stale_key"; one dated more
	// than idemkey.MaxSkew ahead of Now, with kind "future_key". Default (0):
	// Retention. It may not exceed Retention; negative turns the check off. While it
	// is on, keys are remembered for Retention + idemkey.MaxSkew, so a key dated a
	// little ahead cannot outlive its record.
	MaxKeyAge time.Duration
	// RequireTimedKeys refuses a message whose key carries no time (a broker id, a
	// UUIDv4, an intent hash, text), which cannot be judged stale: dead-lettered with
	// kind "untimed_key". Set it when every producer is yours and mints UUIDv7 or
	// ULID ids (idemkey.NewV7; the outbox mints one for a message without an ID).
	RequireTimedKeys bool
	// IgnoreDeadlines applies a message even when its idem.HeaderDeadline has
	// passed. By default such a message is acked and dead-lettered with kind
	// "deadline" (its sender has given up on it), and one whose header is not a
	// time with kind "bad_deadline".
	IgnoreDeadlines bool
	// Now is the clock keys and deadlines are judged by. Nil means time.Now.
	Now func() time.Time
	// Registerer, if set, receives idem_inbox_messages_total{consumer,outcome},
	// idem_duplicates_total{backend="inbox",scope}, idem_inbox_dead_letters_total,
	// idem_inbox_refused_total{consumer,reason} (stale_key, future_key, untimed_key,
	// deadline, bad_deadline),
	// idem_inbox_replays_total{consumer,outcome} (requested replays: applied,
	// already_applied, failed, gave_up), idem_inbox_batch_duration_seconds, and
	// the gauges idem_inbox_dead_letters_open{consumer} and, for a Source that
	// reports lag (idem.LagReporter), idem_inbox_lag_messages{consumer}, which Run
	// keeps (GaugeInterval).
	Registerer prometheus.Registerer
	// Logger receives failures of acks and naks (which are harmless: see the package
	// docs) at warn level. Default slog.Default().
	Logger *slog.Logger
	// ReplayPollInterval is how often Run looks for replays of this consumer's dead
	// letters that an operator requested (DeadLetterAdmin.RequestReplay) and performs
	// them (ReplayRequested). Default 1 s; negative turns the poll off.
	ReplayPollInterval time.Duration
	// GaugeInterval is how often Run, given a Registerer, counts the consumer's
	// open dead letters (idem_inbox_dead_letters_open) and, when the Source is an
	// idem.LagReporter, asks it for its lag (idem_inbox_lag_messages). Run also
	// counts at start and soon after it dead-letters or replays a message. Each
	// read is bounded (10 s); one that fails leaves its gauge as it was and is
	// logged. Default 30 s; negative turns both gauges off.
	GaugeInterval time.Duration
	// MaxReplayAttempts is how many failed tries of one requested replay are made
	// before the request is given up (recorded in the letter, which is pending
	// again). Default 5.
	MaxReplayAttempts int
	// SkipMigrate leaves the schema alone, for deployments that apply `idem migrate
	// print` with their own tool: New then only checks that idem_dead_letters is up
	// to date, and fails with a *migrate.BehindError naming the missing migration.
	SkipMigrate bool
	// TracerProvider makes the spans of each delivery (idem.inbox.process, its
	// idem.inbox.apply, or idem.inbox.duplicate; see the package documentation);
	// nil means the global one (otel.GetTracerProvider). Propagator reads the trace
	// context from the message headers; nil means the global one
	// (otel.GetTextMapPropagator).
	TracerProvider trace.TracerProvider
	Propagator     propagation.TextMapPropagator
}

const (
	// DefaultMaxAttempts is Config.MaxAttempts when zero.
	DefaultMaxAttempts = 10
	// DefaultReplayPollInterval is Config.ReplayPollInterval when zero.
	DefaultReplayPollInterval = time.Second
	// DefaultGaugeInterval is Config.GaugeInterval when zero.
	DefaultGaugeInterval = 30 * time.Second
	// DefaultMaxReplayAttempts is Config.MaxReplayAttempts when zero.
	DefaultMaxReplayAttempts = 5
	// DefaultTxRetryWindow is Config.TxRetryWindow when zero.
	DefaultTxRetryWindow = 5 * time.Second
	// MaxTxRetryWindow bounds Config.TxRetryWindow.
	MaxTxRetryWindow = 10 * time.Minute
	// DefaultRetention is Config.Retention when zero.
	DefaultRetention = 7 * 24 * time.Hour
	// MaxBatchSize bounds Config.BatchSize: a transaction holding more row locks for
	// longer only blocks other consumers.
	MaxBatchSize = 1000
)

// withDefaults returns c with zero fields set to their defaults, validated: the one
// place defaults are applied.
func (c Config) withDefaults() (Config, error) {
	c.BatchSize = cmp.Or(c.BatchSize, 1)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	c.Retention = cmp.Or(c.Retention, DefaultRetention)
	c.MaxKeyAge = cmp.Or(c.MaxKeyAge, c.Retention)
	c.ReplayPollInterval = cmp.Or(c.ReplayPollInterval, DefaultReplayPollInterval)
	c.MaxReplayAttempts = cmp.Or(c.MaxReplayAttempts, DefaultMaxReplayAttempts)
	c.GaugeInterval = cmp.Or(c.GaugeInterval, DefaultGaugeInterval)
	c.TxRetryWindow = cmp.Or(c.TxRetryWindow, DefaultTxRetryWindow)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	if c.Backoff == nil {
		c.Backoff = DefaultBackoff
	}
	if c.Key == nil {
		c.Key = MessageID
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	var ie *idem.InputError
	if err := (idem.Key{Scope: c.Consumer, ID: "x"}).Validate(); errors.As(err, &ie) {
		return c, &idem.InputError{Field: "Config.Consumer", Reason: ie.Reason, Fix: "name the consumer, e.g. \"ledger\""}
	}
	switch {
	case c.BatchSize < 1 || c.BatchSize > MaxBatchSize:
		return c, &idem.InputError{Field: "Config.BatchSize", Reason: fmt.Sprintf("must be 1 to %d (got %d)", MaxBatchSize, c.BatchSize),
			Fix: "use 1 for a transaction per message, or 32–256 for throughput"}
	case c.MaxAttempts < 1:
		return c, &idem.InputError{Field: "Config.MaxAttempts", Reason: fmt.Sprintf("must be at least 1 (got %d)", c.MaxAttempts),
			Fix: "leave it 0 for the default of 10"}
	case c.MaxReplayAttempts < 1:
		return c, &idem.InputError{Field: "Config.MaxReplayAttempts", Reason: fmt.Sprintf("must be at least 1 (got %d)", c.MaxReplayAttempts),
			Fix: "leave it 0 for the default of 5"}
	case c.TxRetryWindow > MaxTxRetryWindow:
		return c, &idem.InputError{Field: "Config.TxRetryWindow", Reason: fmt.Sprintf("is %v, above %v", c.TxRetryWindow, MaxTxRetryWindow),
			Fix: "keep it below the broker's redelivery timeout (a few seconds), or negative to hand a failed batch back at once"}
	case c.Retention < 0:
		return c, &idem.InputError{Field: "Config.Retention", Reason: "is negative", Fix: "leave it 0 for the default of 7 days"}
	case c.MaxKeyAge > c.Retention:
		return c, &idem.InputError{Field: "Config.MaxKeyAge", Reason: fmt.Sprintf("is %v, longer than Retention (%v): a key older than Retention is forgotten but still accepted, so a late retry of it is applied again", c.MaxKeyAge, c.Retention),
			Fix: "leave it 0 to use Retention, or raise Retention"}
	case c.RequireTimedKeys && c.MaxKeyAge < 0:
		return c, &idem.InputError{Field: "Config.RequireTimedKeys", Reason: "is set while MaxKeyAge is negative (the key check is off)",
			Fix: "leave MaxKeyAge 0 (or positive) to judge keys, or unset RequireTimedKeys"}
	}
	return c, nil
}

// DefaultBackoff waits 100 ms after the first failure, doubling up to 1 minute, with
// ±20% jitter so messages that failed together are not retried in lockstep.
func DefaultBackoff(attempt int) time.Duration {
	d := 100 * time.Millisecond << min(max(attempt-1, 0), 10)
	d = min(d, time.Minute)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// MessageID is the default Config.Key: the message's ID as the broker carried it.
func MessageID(m idem.Message) (string, error) {
	if m.ID == "" {
		return "", &idem.InputError{Field: "Message.ID", Reason: "is empty: the broker message carries no id",
			Fix: "set Message.ID (Nats-Msg-Id, AMQP message-id, the Idem-Msg-Id header) at the producer, or set inbox Config.Key to derive a key from the payload"}
	}
	return m.ID, nil
}
