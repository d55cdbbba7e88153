package idemredis

import (
	"context"
	"fmt"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/brokerkit"
	"github.com/redis/go-redis/v9"
)

// StreamSinkConfig configures a StreamSink. The zero value is ready to use.
type StreamSinkConfig struct {
	// MaxLen, if positive, caps every stream the sink writes at about MaxLen entries
	// (XADD MAXLEN ~ MaxLen: Redis trims whole macro nodes, so a stream may hold
	// somewhat more). Zero keeps every entry until it is trimmed some other way.
	//
	// Trimming does not wait for consumers: an entry trimmed before a group read it
	// is never delivered, and one trimmed while pending is dropped from the pending
	// list when a source reclaims it. Size MaxLen for the longest consumer outage
	// you want to survive, or trim yourself by age (XTRIM MINID) once every group
	// has acknowledged past it.
	MaxLen int64
}

// withDefaults returns cfg validated; it is the one place defaults would go.
func (cfg StreamSinkConfig) withDefaults() (StreamSinkConfig, error) {
	if cfg.MaxLen < 0 {
		return cfg, &idem.InputError{Field: "StreamSinkConfig.MaxLen", Reason: fmt.Sprintf("is negative (%d)", cfg.MaxLen),
			Fix: "use 0 to keep every entry, or the number of entries a stream may hold"}
	}
	return cfg, nil
}

// StreamSink is an idem.Sink that appends messages to Redis streams, one stream per
// Message.Topic, in the entry layout of StreamFieldID. It is safe for concurrent use.
//
// Publish returns once Redis has appended every entry. Redis acknowledges before its
// replicas and append-only file have the entry (see the package doc on durability);
// a publisher that must survive a failover re-publishes from its outbox, which is
// safe because consumers deduplicate on the id field.
type StreamSink struct {
	client redis.UniversalClient
	maxLen int64
}

var _ brokerkit.Sink = (*StreamSink)(nil)

// NewStreamSink returns a sink writing through client (a *redis.Client,
// *redis.ClusterClient, *redis.Ring or failover client), which it does not own.
func NewStreamSink(client redis.UniversalClient, cfg StreamSinkConfig) (*StreamSink, error) {
	cfg, err := brokerkit.Configure(checkClient(client), cfg, StreamSinkConfig.withDefaults)
	if err != nil {
		return nil, err
	}
	return &StreamSink{client: client, maxLen: cfg.MaxLen}, nil
}

// Features implements idem.FeatureReporter; see StreamSource for the reasons.
func (s *StreamSink) Features() idem.Features { return streamFeatures() }

// MessagingSystem is the messaging.system of the spans of the outbox relay and the
// inbox that use it: "redis".
func (s *StreamSink) MessagingSystem() string { return "redis" }

// Publish implements idem.Sink. Every message is validated first, so a bad one
// publishes nothing. The XADDs of one call go in one pipeline (one round trip, one
// per node on a cluster) and land in each stream in the order given. On a
// *idem.BackendError, some entries may have been appended; publishing them all
// again is safe.
func (s *StreamSink) Publish(ctx context.Context, msgs ...idem.Message) error {
	vals := make([][]any, len(msgs))
	for i, m := range msgs {
		if err := m.Validate(); err != nil {
			if len(msgs) == 1 {
				return err
			}
			return fmt.Errorf("message %d of %d: %w", i, len(msgs), err)
		}
		v, err := entryValues(m)
		if err != nil {
			return err
		}
		vals[i] = v
	}
	if err := ctx.Err(); err != nil || len(msgs) == 0 {
		return err
	}
	if len(msgs) == 1 {
		if err := s.client.XAdd(ctx, s.args(msgs[0].Topic, vals[0])).Err(); err != nil {
			return backendError("publish", err)
		}
		return nil
	}
	pipe := s.client.Pipeline()
	for i, m := range msgs {
		pipe.XAdd(ctx, s.args(m.Topic, vals[i]))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return backendError("publish", err)
	}
	return nil
}

func (s *StreamSink) args(stream string, vals []any) *redis.XAddArgs {
	return &redis.XAddArgs{Stream: stream, MaxLen: s.maxLen, Approx: true, Values: vals}
}
