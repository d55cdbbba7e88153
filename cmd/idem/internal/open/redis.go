package open

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/internal/redact"
)

// DefaultRedisDedup is relay --redis-dedup's default, JetStream's default
// duplicate window.
const DefaultRedisDedup = 2 * time.Minute

// openRedis connects a client with opts and checks that the server answers; flag
// and desc name the URL in errors.
func openRedis(ctx context.Context, flag, desc string, opts *redis.Options) (*redis.Client, error) {
	client := redis.NewClient(opts)
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("%s %s: connect: %w", flag, desc, redact.Error(err))
	}
	return client, nil
}

// openRedisStore is serve's --store redis://…[?prefix=P].
func openRedisStore(ctx context.Context, s StoreSpec, reg prometheus.Registerer) (idem.Store, func(), error) {
	client, err := openRedis(ctx, "--store", s.Desc, s.redis)
	if err != nil {
		return nil, nil, err
	}
	st, err := idemredis.New(client, idemredis.Config{Prefix: s.prefix, Registerer: reg})
	if err != nil {
		_ = client.Close()
		return nil, nil, fmt.Errorf("--store %s: %w", s.Desc, err)
	}
	return st, func() { _ = client.Close() }, nil
}

// openRedisSink is relay's --sink redis://…: Redis Streams, one stream per topic,
// with --redis-dedup's duplicate window.
func openRedisSink(ctx context.Context, s SinkSpec, o *SinkFlags) (idem.Sink, func(), error) {
	client := redis.NewClient(s.redis)
	pctx, cancel := context.WithTimeout(ctx, sinkCheckTimeout)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		_ = client.Close()
		return nil, nil, sinkDown(s, err)
	}
	r, err := idemredis.NewStreamSink(client, idemredis.StreamSinkConfig{Dedup: o.RedisDedup})
	if err != nil {
		_ = client.Close()
		return nil, nil, fmt.Errorf("--sink %s: %w", s.Desc, redact.Error(err))
	}
	return r, func() { _ = client.Close() }, nil
}

// openRedisBroker is verify's --broker redis://…: the run's own stream, every
// connection through a chaos.Proxy.
func openRedisBroker(ctx context.Context, b *Broker, raw, run string) error {
	opts, err := redis.ParseURL(raw)
	if err != nil {
		return fmt.Errorf("--broker %q: %s: use redis://host:6379[/db]", redact.URL(raw), redact.String(err.Error()))
	}
	b.name = "redis streams " + opts.Addr
	if err := b.proxyTo("redis", opts.Addr); err != nil {
		return err
	}
	opts.Addr = b.proxy.Addr()
	opts.MaxRetries = -1 // a cut must surface, not be retried inside the client
	b.topic = "idem:verify:" + run + ":orders"
	admin, err := openRedis(ctx, "--broker", redact.URL(raw), opts)
	if err != nil {
		return err
	}
	b.cleanup = append(b.cleanup, func() { admin.Del(context.Background(), b.topic); admin.Close() })
	b.stored = func(ctx context.Context) (int, bool) {
		n, err := admin.XLen(ctx, b.topic).Result()
		return int(n), err == nil
	}
	b.openSink = func(ctx context.Context) (idem.Sink, error) {
		c := redis.NewClient(opts)
		// The relay's window (relay --redis-dedup's default): a restarted relay's
		// copies of its last round are dropped by Redis, as JetStream drops them.
		s, err := idemredis.NewStreamSink(c, idemredis.StreamSinkConfig{Dedup: DefaultRedisDedup})
		if err != nil {
			c.Close()
			return nil, err
		}
		return &ownedSink{s, closer{[]func() error{c.Close}}}, nil
	}
	b.openSource = func(ctx context.Context) (idem.Source, error) {
		c := redis.NewClient(opts)
		s, err := idemredis.NewStreamSource(c, idemredis.StreamSourceConfig{Stream: b.topic, Group: "ledger", MinIdle: verifyAckWait,
			Block: 200 * time.Millisecond})
		if err != nil {
			c.Close()
			return nil, err
		}
		return keepingSource{&ownedSource{s, closer{[]func() error{c.Close}}}, s}, nil
	}
	return nil
}
