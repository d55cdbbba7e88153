package idemredis

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

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

	// Dedup, if positive, is the sink's duplicate window, as JetStream's
	// Nats-Msg-Id window: a message whose ID the sink appended to the same stream
	// less than Dedup ago is acknowledged and not appended again. The copies an
	// outbox relay publishes again (after it died between the publish and marking
	// its rows, or after a batch failed part way) then never reach a consumer.
	// The inbox drops such copies anyway; the window saves their deliveries and
	// the consumers' work on them.
	//
	// Each message appended leaves a marker key (DedupKey) living Dedup, written
	// with the entry by one script, after the append succeeded: a failed append
	// leaves no marker, so the retry is appended. Size Redis's memory for about
	// 100 bytes times the publish rate times Dedup. A marker evicted early (an LRU
	// maxmemory-policy) or lost with its entry in a failover only lets a copy
	// through, which the inbox drops. A copy of a message whose entry was trimmed
	// or deleted is still dropped within the window, as JetStream drops it.
	//
	// The window's scripts publish at about 0.4× the rate of the plain pipelined
	// XADDs on one Redis (BENCHMARKS.md), well above what an outbox relay sends.
	//
	// Zero (the default) appends every publish. At most MaxDedup.
	Dedup time.Duration
}

// MaxDedup bounds StreamSinkConfig.Dedup: a day of markers is already more memory
// than a window needs; a relay republishes within minutes.
const MaxDedup = 24 * time.Hour

// withDefaults returns cfg validated; it is the one place defaults would go.
func (cfg StreamSinkConfig) withDefaults() (StreamSinkConfig, error) {
	if cfg.MaxLen < 0 {
		return cfg, &idem.InputError{Field: "StreamSinkConfig.MaxLen", Reason: fmt.Sprintf("is negative (%d)", cfg.MaxLen),
			Fix: "use 0 to keep every entry, or the number of entries a stream may hold"}
	}
	if cfg.Dedup < 0 || cfg.Dedup > MaxDedup {
		return cfg, &idem.InputError{Field: "StreamSinkConfig.Dedup", Reason: fmt.Sprintf("is %v", cfg.Dedup),
			Fix: fmt.Sprintf("use 0 to append every publish, or a window of up to %v (JetStream's default is 2m)", MaxDedup)}
	}
	if cfg.Dedup > 0 && cfg.Dedup < time.Millisecond {
		return cfg, &idem.InputError{Field: "StreamSinkConfig.Dedup", Reason: fmt.Sprintf("is %v, below Redis's 1ms resolution", cfg.Dedup),
			Fix: "use 0 to append every publish, or a window of at least 1ms"}
	}
	return cfg, nil
}

// StreamSink is an idem.Sink that appends messages to Redis streams, one stream per
// Message.Topic, in the entry layout of StreamFieldID. It is safe for concurrent use.
//
// Publish returns once Redis has appended every entry. Redis acknowledges before its
// replicas and append-only file have the entry (see the package doc on durability);
// a publisher that must survive a failover re-publishes from its outbox, which is
// safe because consumers deduplicate on the id field. When some entries of a batch
// were appended and others failed (without a Dedup window), the error is an
// *idem.PublishError saying which, so the outbox relay sends only the others again.
type StreamSink struct {
	client redis.UniversalClient
	maxLen int64
	dedup  time.Duration
}

var _ brokerkit.Sink = (*StreamSink)(nil)

// NewStreamSink returns a sink writing through client (a *redis.Client,
// *redis.ClusterClient, *redis.Ring or failover client), which it does not own.
func NewStreamSink(client redis.UniversalClient, cfg StreamSinkConfig) (*StreamSink, error) {
	cfg, err := brokerkit.Configure(checkClient(client), cfg, StreamSinkConfig.withDefaults)
	if err != nil {
		return nil, err
	}
	return &StreamSink{client: client, maxLen: cfg.MaxLen, dedup: cfg.Dedup}, nil
}

// Features implements idem.FeatureReporter; see StreamSource for the reasons.
func (s *StreamSink) Features() idem.Features { return streamFeatures() }

// MessagingSystem is the messaging.system of the spans of the outbox relay and the
// inbox that use it: "redis".
func (s *StreamSink) MessagingSystem() string { return "redis" }

// Publish implements idem.Sink. Every message is validated first, so a bad one
// publishes nothing. The XADDs of one call go in one pipeline (one round trip, one
// per node on a cluster) and land in each stream in the order given; with Dedup,
// each run of messages to one stream is one script that skips a message the
// window holds. On a *idem.BackendError, some entries may have been appended;
// publishing them all again is safe.
func (s *StreamSink) Publish(ctx context.Context, msgs ...idem.Message) error {
	vals := make([][]any, len(msgs))
	for i, m := range msgs {
		err := m.Validate()
		if err == nil && s.dedup > 0 {
			_, err = DedupKey(m.Topic, m.ID)
		}
		if err != nil {
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
	if s.dedup > 0 {
		return s.publishOnce(ctx, msgs, vals)
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
	cmds, err := pipe.Exec(ctx)
	if err == nil {
		return nil
	}
	err = backendError("publish", err)
	if len(cmds) == len(msgs) {
		acc := make([]bool, len(cmds))
		for i, c := range cmds {
			acc[i] = c.Err() == nil
		}
		if slices.Contains(acc, true) { // the relay sends only the others again
			err = &idem.PublishError{Accepted: acc, Err: err}
		}
	}
	return err
}

func (s *StreamSink) args(stream string, vals []any) *redis.XAddArgs {
	return &redis.XAddArgs{Stream: stream, MaxLen: s.maxLen, Approx: true, Values: vals}
}

// appendOnce appends a run of entries to one stream, each unless the stream's
// duplicate window holds its ID, and marks each ID appended for the window.
// KEYS: the stream, then each entry's marker (DedupKey). ARGV: the window in ms,
// MaxLen (0: none), then per entry the number of its field and value arguments
// and those arguments. A marker is written after its entry's append: an append
// that fails leaves none, so its retry is appended (the entries before it are
// appended and marked, and dropped on the retry). An ID twice in one run is
// appended once. Returns the number of entries appended.
var appendOnce = redis.NewScript(`
local window, maxlen = ARGV[1], tonumber(ARGV[2])
local a, appended = 3, 0
for i = 2, #KEYS do
  local n = tonumber(ARGV[a])
  if redis.call('EXISTS', KEYS[i]) == 0 then
    if maxlen > 0 then
      redis.call('XADD', KEYS[1], 'MAXLEN', '~', maxlen, '*', unpack(ARGV, a + 1, a + n))
    else
      redis.call('XADD', KEYS[1], '*', unpack(ARGV, a + 1, a + n))
    end
    redis.call('SET', KEYS[i], '', 'PX', window)
    appended = appended + 1
  end
  a = a + 1 + n
end
return appended
`)

// dedupRun bounds the entries of one appendOnce call, so that one call does not
// hold Redis (single-threaded) for long.
const dedupRun = 100

// publishOnce publishes through appendOnce: one script per run of consecutive
// messages to the same stream (at most dedupRun), the scripts of one call in one
// pipeline. A server that lost the cached script (a restart, SCRIPT FLUSH) gets
// the whole call again with the script's body, which is safe: the window drops
// what the first pass appended.
func (s *StreamSink) publishOnce(ctx context.Context, msgs []idem.Message, vals [][]any) error {
	// run returns whether a script was missing, and the pipeline's first error.
	run := func(eval func(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd) (bool, error) {
		pipe := s.client.Pipeline()
		var cmds []*redis.Cmd
		for start := 0; start < len(msgs); {
			end := start + 1
			for end < len(msgs) && end-start < dedupRun && msgs[end].Topic == msgs[start].Topic {
				end++
			}
			keys := make([]string, 1, 1+end-start)
			keys[0] = msgs[start].Topic
			args := []any{s.dedup.Milliseconds(), s.maxLen}
			for i := start; i < end; i++ {
				key, _ := DedupKey(msgs[i].Topic, msgs[i].ID) // checked in Publish
				keys = append(keys, key)
				args = append(append(args, len(vals[i])), vals[i]...)
			}
			cmds = append(cmds, eval(ctx, pipe, keys, args...))
			start = end
		}
		_, err := pipe.Exec(ctx)
		// On a cluster a node restarted since it last ran the script lacks it
		// while the others have it: any NOSCRIPT, not only the first error.
		return slices.ContainsFunc(cmds, func(c *redis.Cmd) bool { return isNoScript(c.Err()) }), err
	}
	missing, err := run(appendOnce.EvalSha)
	if missing {
		_, err = run(appendOnce.Eval)
	}
	if err != nil {
		return backendError("publish", err)
	}
	return nil
}

// DedupKey is the key of the marker StreamSinkConfig.Dedup keeps for message id
// appended to stream: "idem:dedup:" and the stream in braces (the stream's name
// as its hash tag, so that a Redis Cluster keeps the marker in the stream's slot
// and one script writes both), then ":" and the id. A stream name with a hash
// tag of its own keeps it: "idem:dedup:" + stream + ":" + id.
//
// It returns an *idem.InputError for a stream name with a '}' outside a hash tag
// ("a}b"), whose slot no other key can share.
func DedupKey(stream, id string) (string, error) {
	if open := strings.IndexByte(stream, '{'); open >= 0 {
		if end := strings.IndexByte(stream[open+1:], '}'); end > 0 {
			return "idem:dedup:" + stream + ":" + id, nil // the stream's own tag comes first
		}
	}
	if strings.IndexByte(stream, '}') >= 0 {
		return "", &idem.InputError{Field: "Message.Topic", Reason: fmt.Sprintf("%q has a '}' outside a {hash tag}, so no marker key can share its cluster slot", stream),
			Fix: "remove the '}', or name the stream with a hash tag ({orders}), when StreamSinkConfig.Dedup is set"}
	}
	return "idem:dedup:{" + stream + "}:" + id, nil
}
