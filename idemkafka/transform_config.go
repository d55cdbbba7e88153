package idemkafka

import (
	"cmp"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/idemhq/idem"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of TransformConfig.
const (
	// DefaultTransformBatch is how many consumed records one transaction carries at
	// most: large enough that the two extra round trips of a transaction (offsets
	// and EndTxn) are spread over many records, small enough that an abort redoes
	// little work.
	DefaultTransformBatch = 100
	// DefaultTransactionTimeout is how long the broker lets a transaction stay open
	// before it aborts it: the bound on how long a crashed worker's open
	// transaction holds up read_committed readers of the partitions it wrote.
	DefaultTransactionTimeout = 10 * time.Second
	// DefaultRetryDelay is the first wait after an aborted transaction; it doubles
	// after each consecutive abort up to MaxRetryDelay.
	DefaultRetryDelay = 100 * time.Millisecond
	// MaxRetryDelay caps the wait between retries of a failing batch.
	MaxRetryDelay = 10 * time.Second
)

// Limits of TransformConfig, so a typo cannot open a thousand connections or hold a
// million records in one transaction.
const (
	maxTransformWorkers = 64
	maxTransformBatch   = 10_000
	maxTxnTimeout       = 15 * time.Minute // Kafka's transaction.max.timeout.ms default
)

// TransformConfig configures a Transform. Brokers, Group, Topics and
// TransactionalID are required; the rest may be left zero.
type TransformConfig struct {
	// Brokers are the seed brokers ("host:9092"); the client discovers the rest.
	Brokers []string
	// Group is the consumer group whose offsets the transactions commit.
	Group string
	// Topics are consumed by the group.
	Topics []string
	// TransactionalID identifies this instance's producers to the transaction
	// coordinator; worker i uses TransactionalID + "-" + i. It must be unique
	// among the instances running at once and stable across restarts of one
	// instance (a pod name of a StatefulSet, a host name): a restarted instance
	// then fences the producers of the one it replaces, whose transactions can no
	// longer commit, and aborts any it left open. Two live instances sharing an
	// ID fence each other in turn: one of them stops with ErrFenced.
	TransactionalID string
	// Workers is how many transactional sessions (group members, each with its
	// own producer) this instance runs. Zero means 1; at most 64.
	Workers int
	// MaxBatch is how many consumed records one transaction carries at most.
	// Zero means DefaultTransformBatch; at most 10,000.
	MaxBatch int
	// TransactionTimeout is how long the broker lets a transaction stay open
	// before aborting it, and the bound on ending one. Zero means
	// DefaultTransactionTimeout; at most 15 minutes (Kafka's
	// transaction.max.timeout.ms default, above which the broker refuses it).
	TransactionTimeout time.Duration
	// RetryDelay is the wait after an aborted transaction before the batch is
	// consumed again, doubling per consecutive abort up to MaxRetryDelay. Zero
	// means DefaultRetryDelay.
	RetryDelay time.Duration
	// DeadLetterTopic, if set, receives a copy of each consumed record whose
	// handler returned an error marked with idem.Permanent, in the same
	// transaction, with the error in the "Idem-Error" header; the pipeline then
	// goes on. If empty, such an error stops Run, since retrying cannot help and
	// skipping the record silently would lose it.
	DeadLetterTopic string
	// Logger, if set, receives aborted transactions and their reasons.
	Logger *slog.Logger
	// Registerer, if set, receives idem_kafka_transactions_total{group,outcome},
	// idem_kafka_transform_records_total{group,kind} and
	// idem_kafka_transaction_duration_seconds{group}.
	Registerer prometheus.Registerer
	// TracerProvider makes an idem.kafka.transaction span per transaction and an
	// idem.kafka.transform span per consumed record (a child of the trace found in
	// the record's headers, linked to its transaction); the records produced carry
	// the latter's trace context in their headers. Nil means the global provider.
	// Propagator reads and writes those headers; nil means the global one.
	TracerProvider trace.TracerProvider
	Propagator     propagation.TextMapPropagator
	// Options are extra franz-go client options (TLS, SASL, session and rebalance
	// timeouts, fetch sizes, start offset, linger: none by default). They are
	// applied before the adapter's own, which set the group, the topics, the
	// transactional ID and timeout, read_committed fetching, acks=all and manual
	// commits, and override any option setting those.
	Options []kgo.Opt
}

// withDefaults returns cfg with zero fields replaced by their defaults, validated.
func (cfg TransformConfig) withDefaults() (TransformConfig, error) {
	if err := cfg.validate(); err != nil {
		return cfg, err
	}
	cfg.Workers = cmp.Or(cfg.Workers, 1)
	cfg.MaxBatch = cmp.Or(cfg.MaxBatch, DefaultTransformBatch)
	cfg.TransactionTimeout = cmp.Or(cfg.TransactionTimeout, DefaultTransactionTimeout)
	cfg.RetryDelay = cmp.Or(cfg.RetryDelay, DefaultRetryDelay)
	return cfg, nil
}

func (cfg TransformConfig) validate() error {
	in := func(field, reason, fix string) error {
		return &idem.InputError{Field: "TransformConfig." + field, Reason: reason, Fix: fix}
	}
	switch {
	case len(cfg.Brokers) == 0:
		return in("Brokers", "is empty", `list at least one seed broker, e.g. []string{"localhost:9092"}`)
	case cfg.Group == "":
		return in("Group", "is empty", "name the consumer group, e.g. the pipeline's name")
	case len(cfg.Topics) == 0:
		return in("Topics", "is empty", "list the topics the pipeline consumes")
	case cfg.TransactionalID == "":
		return in("TransactionalID", "is empty", "set an ID unique per running instance and stable across its restarts, e.g. the pod name")
	case len(cfg.TransactionalID) > 200:
		return in("TransactionalID", fmt.Sprintf("is longer than 200 bytes (got %d)", len(cfg.TransactionalID)), "shorten it")
	case cfg.Workers < 0 || cfg.Workers > maxTransformWorkers:
		return in("Workers", fmt.Sprintf("is %d", cfg.Workers), "leave it zero for 1 or set 1 to 64")
	case cfg.MaxBatch < 0 || cfg.MaxBatch > maxTransformBatch:
		return in("MaxBatch", fmt.Sprintf("is %d", cfg.MaxBatch), "leave it zero for 100 or set 1 to 10000")
	case cfg.TransactionTimeout < 0 || cfg.TransactionTimeout > maxTxnTimeout:
		return in("TransactionTimeout", fmt.Sprintf("is %v", cfg.TransactionTimeout), "leave it zero for 10s or set a positive duration up to 15m")
	case cfg.TransactionTimeout != 0 && cfg.TransactionTimeout < time.Second:
		return in("TransactionTimeout", fmt.Sprintf("is %v, under 1s", cfg.TransactionTimeout), "allow at least 1s: a batch must be consumed, transformed and produced within it")
	case cfg.RetryDelay < 0 || cfg.RetryDelay > MaxRetryDelay:
		return in("RetryDelay", fmt.Sprintf("is %v", cfg.RetryDelay), "leave it zero for 100ms or set a positive duration up to 10s")
	}
	for i, t := range cfg.Topics {
		if t == "" {
			return in("Topics", fmt.Sprintf("has an empty name at index %d", i), "remove it or name the topic")
		}
		if t == cfg.DeadLetterTopic {
			return in("DeadLetterTopic", fmt.Sprintf("is the consumed topic %q", t), "dead-letter to a topic the pipeline does not consume, or it would consume its own dead letters")
		}
	}
	if strings.ContainsAny(cfg.TransactionalID, " \t\n") {
		return in("TransactionalID", fmt.Sprintf("%q contains white space", cfg.TransactionalID), "use letters, digits, '.', '_' and '-'")
	}
	return nil
}
