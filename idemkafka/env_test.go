package idemkafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkafka"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// cluster is an in-process Kafka (kfake) with the topics seeded, closed when t ends.
func cluster(t testing.TB, partitions int32, topics ...string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topics...))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// fastGroup tunes the group protocol for an in-process cluster: members notice a
// rebalance at their next heartbeat, so a 100 ms heartbeat makes a join or a leave
// take effect in a fraction of a second instead of the default 3 s.
func fastGroup() []kgo.Opt {
	return []kgo.Opt{
		kgo.HeartbeatInterval(100 * time.Millisecond),
		kgo.SessionTimeout(6 * time.Second), // kfake's minimum
		kgo.RebalanceTimeout(5 * time.Second),
		kgo.FetchMaxWait(500 * time.Millisecond),
	}
}

func newSink(t testing.TB, c *kfake.Cluster) *idemkafka.Sink {
	t.Helper()
	sink, err := idemkafka.NewSink(idemkafka.SinkConfig{Brokers: c.ListenAddrs()})
	return idemtest.Opened(t, sink, err)
}

// newSource joins group on c, closed when t ends; extra options follow fastGroup's.
func newSource(t testing.TB, c *kfake.Cluster, group, topic string, extra ...kgo.Opt) *idemkafka.Source {
	t.Helper()
	return newSourceConfig(t, idemkafka.SourceConfig{Brokers: c.ListenAddrs(), Group: group, Topics: []string{topic},
		CommitInterval: 200 * time.Millisecond, Options: append(fastGroup(), extra...)})
}

func newSourceConfig(t testing.TB, cfg idemkafka.SourceConfig) *idemkafka.Source {
	t.Helper()
	src, err := idemkafka.NewSource(cfg)
	return idemtest.Opened(t, src, err)
}

// fixture is one topic on its own cluster with a sink and a group name.
type fixture struct {
	c     *kfake.Cluster
	topic string
	group string
	sink  *idemkafka.Sink
}

func setup(t testing.TB, partitions int32) fixture {
	t.Helper()
	topic := testsvc.UniqueName("idemkafka-")
	c := cluster(t, partitions, topic)
	return fixture{c: c, topic: topic, group: testsvc.UniqueName("group-"), sink: newSink(t, c)}
}

func (f fixture) source(t testing.TB, extra ...kgo.Opt) *idemkafka.Source {
	t.Helper()
	return newSource(t, f.c, f.group, f.topic, extra...)
}

// env is the fixture as idemtest sees a broker.
func (f fixture) env() idemtest.BrokerEnv {
	return idemtest.BrokerEnv{Topic: f.topic, Sink: f.sink, Features: f.sink.Features(),
		NewSource: func(t *testing.T) idem.Source { return f.source(t) },
		// A closed source leaves the group at once; the next member resumes from
		// the committed offsets as soon as it has joined.
		Redelivery: 5 * time.Second}
}

// msgs returns n messages numbered from 0, spread over keys ordering keys.
func (f fixture) msgs(n, keys int) []idem.Message {
	out := make([]idem.Message, n)
	for i := range out {
		out[i] = idem.Message{ID: fmt.Sprintf("m-%04d", i), Topic: f.topic, OrderingKey: fmt.Sprint("key-", i%keys),
			Headers: map[string]string{"n": fmt.Sprint(i)}, Payload: []byte(fmt.Sprint(i))}
	}
	return out
}

// committed returns the group's committed offset of each partition of the topic.
func (f fixture) committed(t testing.TB) map[int32]int64 {
	t.Helper()
	client, err := kgo.NewClient(kgo.SeedBrokers(f.c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = f.group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = f.topic
	rt.Partitions = []int32{0, 1, 2, 3}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), client)
	if err != nil {
		t.Fatalf("OffsetFetch: %v", err)
	}
	out := make(map[int32]int64)
	for _, rt := range resp.Topics {
		for _, p := range rt.Partitions {
			if p.ErrorCode == 0 && p.Offset >= 0 {
				out[p.Partition] = p.Offset
			}
		}
	}
	return out
}

func (f fixture) publish(t testing.TB, msgs ...idem.Message) {
	t.Helper()
	idemtest.Publish(t, f.sink, msgs...)
}

// The idemtest helpers under the names these tests use.
var (
	receive  = idemtest.Receive
	receiveN = idemtest.ReceiveN
	ack      = idemtest.Ack
)

func idsOf(ds []idem.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

// consumer receives and acknowledges in the background, recording every delivery,
// until stopped: one member of the group in the rebalance tests.
type consumer struct {
	name   string
	src    *idemkafka.Source
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	received []string // IDs in the order received
	acked    map[string]bool
	errs     []error // unexpected errors
}

// startConsumer receives from src in two goroutines at once, as an inbox with
// concurrent workers does.
func startConsumer(name string, src *idemkafka.Source) *consumer {
	ctx, cancel := context.WithCancel(context.Background())
	c := &consumer{name: name, src: src, cancel: cancel, done: make(chan struct{}), acked: make(map[string]bool)}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { c.run(ctx) })
	}
	go func() { wg.Wait(); close(c.done) }()
	return c
}

func (c *consumer) run(ctx context.Context) {
	for ctx.Err() == nil {
		ds, err := c.src.Receive(ctx, 10)
		if err != nil {
			if ctx.Err() == nil {
				c.fail(fmt.Errorf("%s: Receive: %w", c.name, err))
			}
			return
		}
		for _, d := range ds {
			c.mu.Lock()
			c.received = append(c.received, d.ID)
			c.mu.Unlock()
			c.settle(d)
		}
	}
}

// settle acknowledges d; ErrRevoked is expected after a rebalance and leaves d to
// its partition's new owner.
func (c *consumer) settle(d idem.Delivery) {
	err := d.Settler.Ack(context.Background())
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil:
		c.acked[d.ID] = true
	case !errors.Is(err, idemkafka.ErrRevoked):
		c.errs = append(c.errs, fmt.Errorf("%s: Ack %s: %w", c.name, d.ID, err))
	}
}

func (c *consumer) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, err)
}

func (c *consumer) stop() {
	c.cancel()
	<-c.done
}

func (c *consumer) snapshot() (received []string, acked map[string]bool, errs []error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	acked = make(map[string]bool, len(c.acked))
	for id := range c.acked {
		acked[id] = true
	}
	return append([]string(nil), c.received...), acked, append([]error(nil), c.errs...)
}
