package open

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/internal/redact"
)

// redisClusterSpec is --store redis-cluster://…: the cluster client's options and
// the store's WAIT settings.
type redisClusterSpec struct {
	opts        *redis.ClusterOptions
	wait        int
	waitTimeout time.Duration
}

const redisClusterUsage = "use redis-cluster://host:6379[?addr=host2:6379&addr=host3:6379][&prefix=idem:][&wait=1][&wait_timeout=1s]"

// parseRedisClusterStore checks --store redis-cluster://host:port[?addr=…&prefix=P&wait=N&wait_timeout=D]:
// a Redis Cluster reached through any of its nodes (the first and each addr), with
// idemredis.Config's Prefix, WaitReplicas and WaitTimeout.
func parseRedisClusterStore(s StoreSpec) (StoreSpec, error) {
	s.Kind = "redis-cluster"
	u, err := url.Parse(s.Raw)
	if err != nil { // checkURL refused it already
		return s, fmt.Errorf("--store %s: not a URL: %s", s.Desc, redisClusterUsage)
	}
	q := u.Query()
	spec := &redisClusterSpec{}
	s.prefix = q.Get("prefix")
	if v := q.Get("wait"); v != "" {
		if spec.wait, err = strconv.Atoi(v); err != nil || spec.wait < 0 {
			return s, fmt.Errorf("--store %s: wait=%q is not a replica count: %s", s.Desc, v, redisClusterUsage)
		}
	}
	if v := q.Get("wait_timeout"); v != "" {
		if spec.waitTimeout, err = time.ParseDuration(v); err != nil {
			return s, fmt.Errorf("--store %s: wait_timeout=%q: %v: %s", s.Desc, v, err, redisClusterUsage)
		}
	}
	for _, name := range []string{"prefix", "wait", "wait_timeout"} {
		q.Del(name)
	}
	// go-redis reads the rest (addr=, timeouts, credentials) from a redis:// URL.
	u.Scheme, u.RawQuery = "redis", q.Encode()
	if spec.opts, err = redis.ParseClusterURL(u.String()); err != nil {
		return s, fmt.Errorf("--store %s: %s: %s", s.Desc, redact.String(err.Error()), redisClusterUsage)
	}
	// Check the store's options now, so a bad prefix or wait is a usage error.
	probe := redis.NewClusterClient(&redis.ClusterOptions{}) // never dialled
	defer probe.Close()
	if _, err := idemredis.New(probe, idemredis.Config{
		Prefix: s.prefix, WaitReplicas: spec.wait, WaitTimeout: spec.waitTimeout}); err != nil {
		return s, fmt.Errorf("--store %s: %w", s.Desc, err)
	}
	s.cluster = spec
	s.Desc = fmt.Sprintf("redis cluster (%s, WAIT %d)", strings.Join(spec.opts.Addrs, ","), spec.wait)
	return s, nil
}

// openRedisClusterStore is serve's --store redis-cluster://….
func openRedisClusterStore(ctx context.Context, s StoreSpec, reg prometheus.Registerer) (idem.Store, func(), error) {
	client := redis.NewClusterClient(s.cluster.opts)
	if err := client.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }); err != nil {
		_ = client.Close()
		return nil, nil, fmt.Errorf("--store %s: connect: %w", s.Desc, redact.Error(err))
	}
	st, err := idemredis.New(client, idemredis.Config{Prefix: s.prefix, Registerer: reg,
		WaitReplicas: s.cluster.wait, WaitTimeout: s.cluster.waitTimeout})
	if err != nil {
		_ = client.Close()
		return nil, nil, fmt.Errorf("--store %s: %w", s.Desc, err)
	}
	return st, func() { _ = client.Close() }, nil
}
