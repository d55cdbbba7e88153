package idemredis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/stream"
)

// DefaultPushPrefix is the key prefix of a PushStore whose
// PushStoreConfig.Prefix is empty.
const DefaultPushPrefix = "idem:stream:"

// PushStoreConfig configures a PushStore. The zero value is ready to use.
type PushStoreConfig struct {
	// Prefix starts every key the store writes. Empty means DefaultPushPrefix.
	// The rules of Config.Prefix apply.
	Prefix string
	// Now is the clock of event times and retention. Nil means time.Now.
	Now func() time.Time
	// ClientExpiry and MaxClients bound the clients Trim waits for; see
	// stream.DefaultClientExpiry and stream.DefaultMaxClients.
	ClientExpiry time.Duration
	MaxClients   int
}

// PushStore is a stream.Store: it keeps the channels a stream.Server pushes to
// browsers. (It is not StreamSource or StreamSink, which carry idem messages
// over Redis Streams; a push channel is not a Redis stream.)
//
// Each channel is a sorted set of events scored by seq, a counter for the
// head, a hash of append keys, a hash of client acks with a sorted set of when
// each client was last seen, and a sorted set of event times for retention.
// Every append is one Lua script, so seqs are assigned atomically and without
// gaps. On Redis Cluster a channel's keys share one slot (the channel is their
// hash tag), so channels spread over the shards; the set of channels that Trim
// walks is one key, written by its own SADD before each append.
//
// Redis keeps what its persistence settings keep: without AOF (appendfsync
// always), a restart can lose recent events, and so can a failover to a replica
// (replication is asynchronous), and their seqs are then reused.
// Use stream.SQLStore where the events must survive what the business data
// survives.
type PushStore struct {
	c       redis.UniversalClient
	prefix  string
	now     func() time.Time
	clients stream.ClientBounds
}

var _ stream.Store = (*PushStore)(nil)

// NewPushStore returns a store on c.
func NewPushStore(c redis.UniversalClient, cfg PushStoreConfig) (*PushStore, error) {
	if c == nil {
		return nil, &idem.InputError{Field: "client", Reason: "is nil",
			Fix: "pass a connected client, e.g. redis.NewClient(&redis.Options{Addr: \"localhost:6379\"})"}
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPushPrefix
	}
	if err := (Config{Prefix: cfg.Prefix}).validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	bounds, err := stream.NewClientBounds(cfg.ClientExpiry, cfg.MaxClients)
	if err != nil {
		return nil, err
	}
	return &PushStore{c: c, prefix: cfg.Prefix, now: cfg.Now, clients: bounds}, nil
}

// sharded reports whether c spreads keys over several Redis nodes, where a script
// may only touch keys of one slot.
func sharded(c redis.UniversalClient) bool {
	switch c.(type) {
	case *redis.ClusterClient, *redis.Ring:
		return true
	}
	return false
}

// checkTag refuses, on a sharded client, a channel whose keys would not share a
// hash slot (see keys).
func (s *PushStore) checkTag(channel string) error {
	if sharded(s.c) && strings.HasPrefix(channel, "}") {
		return &idem.InputError{Field: "channel", Reason: fmt.Sprintf("starts with '}' (%.40q)", channel),
			Fix: "on Redis Cluster a channel is its keys' hash tag: start it with another character"}
	}
	return nil
}

// keys of one channel: head, events, append keys, acks, times, clients seen. The
// channel is their hash tag, so on a Redis Cluster they share a slot. A channel
// holding '}' still gives all its keys one tag (what precedes its first '}'); only
// a channel starting with '}' gives an empty tag, which Redis ignores, so such a
// channel's keys would hash apart: checkTag refuses it on a cluster.
func (s *PushStore) keys(channel string) []string {
	base := s.prefix + "{" + channel + "}:"
	return []string{base + "head", base + "events", base + "keys", base + "acks", base + "at", base + "seen"}
}

// appendScript: KEYS head, events, keys, at and, on one Redis node, channels; ARGV
// body, ikey, at-ms, channel. Returns the stored member "seq:body". On a Redis
// Cluster the channel's keys share a slot (their hash tag is the channel) but the
// set of channels lives elsewhere, so Append adds the channel to it first, in a
// command of its own.
var appendScript = redis.NewScript(`
if ARGV[2] ~= '' then
  local seq = redis.call('HGET', KEYS[3], ARGV[2])
  if seq then
    local m = redis.call('ZRANGEBYSCORE', KEYS[2], seq, seq)
    if m[1] then return m[1] end
  end
end
local seq = redis.call('INCR', KEYS[1])
local member = seq .. ':' .. ARGV[1]
redis.call('ZADD', KEYS[2], seq, member)
redis.call('ZADD', KEYS[4], ARGV[3], seq)
if ARGV[2] ~= '' then redis.call('HSET', KEYS[3], ARGV[2], seq) end
if KEYS[5] then redis.call('SADD', KEYS[5], ARGV[4]) end
return member`)

// stored is an event as kept in Redis, without its seq (the score).
type stored struct {
	Type string          `json:"t"`
	ID   string          `json:"i,omitempty"`
	Data json.RawMessage `json:"d,omitempty"`
	At   int64           `json:"a"`
	Key  string          `json:"k,omitempty"`
}

// Append implements stream.Store.
func (s *PushStore) Append(ctx context.Context, channel string, e stream.Event) (stream.Event, error) {
	if err := stream.ValidateAppend(channel, e); err != nil {
		return stream.Event{}, err
	}
	if err := s.checkTag(channel); err != nil {
		return stream.Event{}, err
	}
	at := s.now().UTC()
	body, err := json.Marshal(stored{Type: e.Type, ID: e.ID, Data: e.Data, At: at.UnixNano(), Key: e.Key})
	if err != nil {
		return stream.Event{}, err
	}
	k := s.keys(channel)
	keys := []string{k[0], k[1], k[2], k[4]}
	if sharded(s.c) {
		// Before the append, so Trim never misses a channel that has events.
		if err := s.c.SAdd(ctx, s.prefix+"channels", channel).Err(); err != nil {
			return stream.Event{}, pushError("append", err)
		}
	} else {
		keys = append(keys, s.prefix+"channels")
	}
	member, err := appendScript.Run(ctx, s.c, keys, body, e.Key, at.UnixMilli(), channel).Text()
	if err != nil {
		return stream.Event{}, pushError("append", err)
	}
	return decodeMember(member)
}

func decodeMember(member string) (stream.Event, error) {
	seqText, body, ok := strings.Cut(member, ":")
	seq, err := strconv.ParseUint(seqText, 10, 64)
	if !ok || err != nil {
		return stream.Event{}, fmt.Errorf("idemredis: damaged push store member %.40q", member)
	}
	var st stored
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		return stream.Event{}, fmt.Errorf("idemredis: damaged push event %d: %w", seq, err)
	}
	return stream.Event{Seq: seq, Type: st.Type, ID: st.ID, Data: st.Data, At: time.Unix(0, st.At).UTC(), Key: st.Key}, nil
}

// Read implements stream.Store.
func (s *PushStore) Read(ctx context.Context, channel string, since uint64, limit int) ([]stream.Event, error) {
	if limit <= 0 {
		limit = 1000
	}
	k := s.keys(channel)
	members, err := s.c.ZRangeArgs(ctx, redis.ZRangeArgs{Key: k[1], Start: "(" + strconv.FormatUint(since, 10), Stop: "+inf",
		ByScore: true, Count: int64(limit)}).Result()
	if err != nil {
		return nil, pushError("read", err)
	}
	out := make([]stream.Event, 0, len(members))
	for _, m := range members {
		e, err := decodeMember(m)
		if err != nil {
			return nil, err
		}
		e.Key = ""
		out = append(out, e)
	}
	return stream.CheckTrimmed(ctx, s.Head, channel, since, out)
}

// Head implements stream.Store.
func (s *PushStore) Head(ctx context.Context, channel string) (uint64, error) {
	n, err := s.c.Get(ctx, s.keys(channel)[0]).Uint64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, pushError("head", err)
}

// ackScript: KEYS acks, seen; ARGV client, seq, now-ms.
var ackScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur or tonumber(ARGV[2]) > tonumber(cur) then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
return 0`)

// Ack implements stream.Store; an ack below the client's previous one only marks the
// client as seen.
func (s *PushStore) Ack(ctx context.Context, channel, client string, seq uint64) error {
	if seq > stream.MaxSeq {
		return &idem.InputError{Field: "seq", Reason: fmt.Sprintf("is %d", seq), Fix: fmt.Sprintf("ack a seq up to %d", uint64(stream.MaxSeq))}
	}
	if err := s.checkTag(channel); err != nil {
		return err
	}
	k := s.keys(channel)
	return pushError("ack", ackScript.Run(ctx, s.c, []string{k[3], k[5]}, client, seq, s.now().UnixMilli()).Err())
}

// trimScript: KEYS events, keys, acks, at, seen; ARGV cutoff-ms,
// client-expiry-ms, max-clients. Forgets clients not seen since the expiry
// (or never, from earlier versions) and all but the max most recently seen,
// then removes events every remaining client acked and events older than the
// cutoff, with their append keys.
var trimScript = redis.NewScript(`
local gone = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', '(' .. ARGV[2])
local over = redis.call('ZCARD', KEYS[5]) - #gone - tonumber(ARGV[3])
if over > 0 then
  local oldest = redis.call('ZRANGE', KEYS[5], #gone, #gone + over - 1)
  for _, c in ipairs(oldest) do table.insert(gone, c) end
end
for _, c in ipairs(gone) do
  redis.call('HDEL', KEYS[3], c)
  redis.call('ZREM', KEYS[5], c)
end
for _, c in ipairs(redis.call('HKEYS', KEYS[3])) do
  if not redis.call('ZSCORE', KEYS[5], c) then redis.call('HDEL', KEYS[3], c) end
end
local upto = 0
local acks = redis.call('HVALS', KEYS[3])
if #acks > 0 then
  upto = math.huge
  for _, v in ipairs(acks) do upto = math.min(upto, tonumber(v)) end
end
local old = redis.call('ZREVRANGEBYSCORE', KEYS[4], ARGV[1], '-inf', 'LIMIT', 0, 1)
if old[1] then upto = math.max(upto, tonumber(old[1])) end
if upto <= 0 then return 0 end
local n = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', upto)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', ARGV[1])
local ks = redis.call('HGETALL', KEYS[2])
for i = 1, #ks, 2 do
  if tonumber(ks[i+1]) <= upto then redis.call('HDEL', KEYS[2], ks[i]) end
end
return n`)

// Trim implements stream.Store.
func (s *PushStore) Trim(ctx context.Context, retention time.Duration) (int, error) {
	channels, err := s.c.SMembers(ctx, s.prefix+"channels").Result()
	if err != nil {
		return 0, pushError("trim", err)
	}
	cutoff := s.now().Add(-retention).UnixMilli()
	expired := s.now().Add(-s.clients.Expiry).UnixMilli()
	total := 0
	for _, ch := range channels {
		k := s.keys(ch)
		n, err := trimScript.Run(ctx, s.c, []string{k[1], k[2], k[3], k[4], k[5]}, cutoff, expired, s.clients.Max).Int()
		if err != nil {
			return total, pushError("trim", err)
		}
		total += n
	}
	return total, nil
}

// pushError wraps err, if any, for op.
func pushError(op string, err error) error {
	if err == nil {
		return nil
	}
	return backendError("push "+op, err)
}
