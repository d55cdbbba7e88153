package idemkafka

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemhq/idem"
	"github.com/twmb/franz-go/pkg/kgo"
)

// backend names the broker in every *idem.BackendError the adapter returns.
const backend = "kafka"

// DefaultCommitInterval is how often a Source retries committing acknowledged
// offsets when SourceConfig.CommitInterval is zero. (It commits them right after
// the Ack that moves them anyway; this is the backstop when such a commit failed.)
const DefaultCommitInterval = time.Second

// maxRecordBatchBytes lets the client send the largest message idem accepts
// (idem.MaxPayload) plus room for its ID, key and headers. The broker's own limit
// (message.max.bytes, 1 MB by default) still applies: raise it on topics that carry
// large payloads.
const maxRecordBatchBytes = idem.MaxPayload + 1<<20

// SinkConfig configures a Sink. Brokers is required; the rest may be left zero.
type SinkConfig struct {
	// Brokers are the seed brokers ("host:9092"); the client discovers the rest.
	Brokers []string
	// Options are extra franz-go client options (TLS, SASL, compression, linger,
	// timeouts), applied after the adapter's own (seed brokers, no linger, batches
	// large enough for idem.MaxPayload) so they can override them. They must keep
	// the idempotent producer and acks=all: NewSink refuses options that disable
	// either, because the adapter's guarantee rests on both.
	Options []kgo.Opt
}

func (cfg SinkConfig) validate() error {
	if len(cfg.Brokers) == 0 {
		return &idem.InputError{Field: "SinkConfig.Brokers", Reason: "is empty", Fix: `list at least one seed broker, e.g. []string{"localhost:9092"}`}
	}
	return nil
}

// SourceConfig configures a Source. Brokers, Group and Topics are required; the rest
// may be left zero.
type SourceConfig struct {
	// Brokers are the seed brokers ("host:9092"); the client discovers the rest.
	Brokers []string
	// Group is the consumer group: sources of one group share the topics'
	// partitions, and the group's committed offsets are where a new member resumes.
	Group string
	// Topics are consumed by the group.
	Topics []string
	// CommitInterval is how often acknowledged offsets not yet committed are
	// committed in the background, which retries a commit that failed.
	// Acknowledged offsets are also committed as soon as an Ack moves them (one
	// commit at a time), when partitions are revoked, and on Close. Zero means
	// DefaultCommitInterval.
	CommitInterval time.Duration
	// StoredOffsets, if set, is called when partitions are assigned, before they
	// are fetched. It returns, per topic and partition, the next offset to consume
	// as recorded in the database together with the effects (the offset of the last
	// applied record + 1; see Offset). Partitions it leaves out resume from the
	// group's committed offset. This is the "offsets in the database" mode: the
	// database, not the group, decides where consumption resumes, so a crash
	// between the effect's commit and the offset commit redelivers nothing.
	StoredOffsets func(ctx context.Context, assigned map[string][]int32) (map[string]map[int32]int64, error)
	// Logger, if set, receives the failures the adapter cannot return to a caller:
	// background and revocation commits that failed (their records are redelivered).
	Logger *slog.Logger
	// Options are extra franz-go client options (TLS, SASL, session, heartbeat and
	// rebalance timeouts, balancers, fetch sizes, start offset). They are applied
	// before the adapter's own, which set the group, the topics, manual commits,
	// BlockRebalanceOnPoll and the partition callbacks and override any option
	// setting those.
	Options []kgo.Opt
}

// withDefaults returns cfg with zero fields replaced by their defaults, validated.
// It is the one place defaults are applied.
func (cfg SourceConfig) withDefaults() (SourceConfig, error) {
	cfg.CommitInterval = cmp.Or(cfg.CommitInterval, DefaultCommitInterval)
	return cfg, cfg.validate()
}

func (cfg SourceConfig) validate() error {
	switch {
	case len(cfg.Brokers) == 0:
		return &idem.InputError{Field: "SourceConfig.Brokers", Reason: "is empty", Fix: `list at least one seed broker, e.g. []string{"localhost:9092"}`}
	case cfg.Group == "":
		return &idem.InputError{Field: "SourceConfig.Group", Reason: "is empty", Fix: "name the consumer group, e.g. the consuming service's name"}
	case len(cfg.Topics) == 0:
		return &idem.InputError{Field: "SourceConfig.Topics", Reason: "is empty", Fix: "list the topics the group consumes"}
	case cfg.CommitInterval < 0:
		return &idem.InputError{Field: "SourceConfig.CommitInterval", Reason: fmt.Sprintf("is negative (%v)", cfg.CommitInterval),
			Fix: "leave it zero for the default (1s) or set a positive interval"}
	}
	for i, t := range cfg.Topics {
		if t == "" {
			return &idem.InputError{Field: "SourceConfig.Topics", Reason: fmt.Sprintf("has an empty name at index %d", i), Fix: "remove it or name the topic"}
		}
	}
	return nil
}
