package idemredis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/idemseq"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/stream"
	"github.com/idemhq/idem/stream/streamtest"
)

// clusterBundle is a test's view of the shared Redis Cluster: a cluster client, a
// key prefix of its own, and the cluster for killing nodes.
type clusterBundle struct {
	cluster *testsvc.RedisCluster
	client  *redis.ClusterClient
	prefix  string
}

func clusterSetup(t testing.TB) clusterBundle {
	t.Helper()
	rc := testsvc.StartRedisCluster(t)
	client := rc.Client(t, &redis.ClusterOptions{MaxRedirects: 16})
	name := testsvc.UniqueName("idemtest:") + ":"
	t.Cleanup(func() { deleteClusterPrefix(t, client, name) })
	return clusterBundle{cluster: rc, client: client, prefix: name}
}

func (b clusterBundle) store(t testing.TB, cfg idemredis.Config) *idemredis.Store {
	t.Helper()
	cfg.Prefix = b.prefix
	s, err := idemredis.New(b.client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// deleteClusterPrefix removes a test's keys from every master.
func deleteClusterPrefix(t testing.TB, client *redis.ClusterClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := client.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		iter := m.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := m.Unlink(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	})
	if err != nil {
		t.Logf("cleanup of %s: %v", prefix, err)
	}
}

// The store's contract on a Redis Cluster of three masters with a replica each,
// through go-redis's ClusterClient, without and with WAIT.
func TestClusterConformance(t *testing.T) {
	t.Parallel()
	for _, wait := range []int{0, 1} {
		t.Run(map[int]string{0: "async", 1: "wait1"}[wait], func(t *testing.T) {
			t.Parallel()
			idemtest.StoreSuite(t, idemtest.Harness{
				New: func(t *testing.T) idem.Store {
					return clusterSetup(t).store(t, idemredis.Config{WaitReplicas: wait, WaitTimeout: 5 * time.Second})
				},
				Unreachable: func(t *testing.T) idem.Store {
					client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{testsvc.ClosedAddr(t)},
						DialTimeout: 200 * time.Millisecond, MaxRetries: 1})
					t.Cleanup(func() { client.Close() })
					s, err := idemredis.New(client, idemredis.Config{WaitReplicas: wait})
					if err != nil {
						t.Fatal(err)
					}
					return s
				},
			})
		})
	}
}

// Inspect, Evict, List and Scopes on a cluster: List and Scopes walk each master in
// turn with a cursor that names the shard.
func TestClusterInspectorSuite(t *testing.T) {
	t.Parallel()
	idemtest.InspectorSuite(t, func(t *testing.T) idem.Store { return clusterSetup(t).store(t, idemredis.Config{}) })
}

func TestClusterSeqSuite(t *testing.T) {
	t.Parallel()
	idemtest.SeqSuite(t, idemtest.SeqHarness{New: func(t *testing.T, cfg idemseq.Config) idemseq.Tracker {
		b := clusterSetup(t)
		tr, err := idemredis.NewSeqTracker(b.client, cfg, b.prefix)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}})
}

// The push store on a cluster: a channel's keys share its hash tag; the set of
// channels is written on its own.
func TestClusterPushStoreSuite(t *testing.T) {
	t.Parallel()
	streamtest.StoreSuite(t, streamtest.Harness{New: func(t *testing.T, cfg streamtest.Config) stream.Store {
		b := clusterSetup(t)
		s, err := idemredis.NewPushStore(b.client, idemredis.PushStoreConfig{Prefix: b.prefix, Now: cfg.Now, MaxClients: cfg.MaxClients})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}})
}

// A channel starting with '}' would give its keys an empty hash tag, hence
// different slots: refused on a cluster before anything is written.
func TestClusterPushStoreRefusesEmptyTag(t *testing.T) {
	t.Parallel()
	b := clusterSetup(t)
	s, err := idemredis.NewPushStore(b.client, idemredis.PushStoreConfig{Prefix: b.prefix})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Append(ctxFor(t), "}x", stream.Event{Type: "t"})
	var ie *idem.InputError
	if !errors.As(err, &ie) || ie.Field != "channel" {
		t.Fatalf("Append on channel \"}x\" = %v, want an InputError on channel", err)
	}
	if _, err := s.Append(ctxFor(t), "a}b", stream.Event{Type: "t"}); err != nil {
		t.Fatalf("Append on channel \"a}b\": %v", err)
	}
}

// Redis Streams on a cluster: the broker suite, with streams on different shards.
func TestClusterStreamBrokerSuite(t *testing.T) {
	t.Parallel()
	idemtest.BrokerSuite(t, func(t *testing.T) idemtest.BrokerEnv {
		b := clusterSetup(t)
		sink, err := idemredis.NewStreamSink(b.client, idemredis.StreamSinkConfig{})
		if err != nil {
			t.Fatal(err)
		}
		topic := b.prefix + "stream"
		return idemtest.BrokerEnv{
			Topic: topic,
			Sink:  sink,
			NewSource: func(t *testing.T) idem.Source {
				src, err := idemredis.NewStreamSource(b.client, idemredis.StreamSourceConfig{Stream: topic, Group: "g", MinIdle: streamMinIdle})
				return idemtest.Opened(t, src, err)
			},
			Features:   sink.Features(),
			Redelivery: streamMinIdle,
		}
	})
}
