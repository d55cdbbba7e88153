package idemkafka_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkafka"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// txPartitions is the partition count of every topic of the transform tests.
const txPartitions = 4

// txEnv is a cluster with an input, an output and a dead-letter topic.
type txEnv struct {
	c             *kfake.Cluster
	in, out, dead string
	group         string
	producer      *kgo.Client // plain producer of the inputs
}

func newTxEnv(t testing.TB) *txEnv {
	t.Helper()
	e := &txEnv{in: testsvc.UniqueName("in-"), out: testsvc.UniqueName("out-"), dead: testsvc.UniqueName("dead-"), group: testsvc.UniqueName("etl-")}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(txPartitions, e.in, e.out, e.dead),
		// A member whose client went away without leaving is noticed within 1.5s.
		kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	e.c = c
	e.producer, err = kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.producer.Close)
	return e
}

// produce writes inputs from..to-1: key "key-i%16", value "in-%05d".
func (e *txEnv) produce(t testing.TB, from, to int) {
	t.Helper()
	var rs []*kgo.Record
	for i := from; i < to; i++ {
		rs = append(rs, &kgo.Record{Topic: e.in, Key: fmt.Appendf(nil, "key-%d", i%16), Value: fmt.Appendf(nil, "in-%05d", i),
			Headers: []kgo.RecordHeader{{Key: idem.HeaderID, Value: fmt.Appendf(nil, "id-%05d", i)}}})
	}
	if err := e.producer.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// config is a transform of the inputs on e with the test cluster's fast group timing.
func (e *txEnv) config(txnID string, workers int) idemkafka.TransformConfig {
	return idemkafka.TransformConfig{Brokers: e.c.ListenAddrs(), Group: e.group, Topics: []string{e.in}, TransactionalID: txnID,
		Workers: workers, MaxBatch: 25, TransactionTimeout: 3 * time.Second, RetryDelay: 10 * time.Millisecond,
		Options: []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond), kgo.SessionTimeout(1500 * time.Millisecond),
			kgo.RebalanceTimeout(3 * time.Second), kgo.FetchMaxWait(200 * time.Millisecond)}}
}

// upper maps "in-00042" to one record "out-00042" on the output topic, same key.
func (e *txEnv) upper(_ context.Context, in *kgo.Record) ([]*kgo.Record, error) {
	return []*kgo.Record{{Topic: e.out, Key: in.Key, Value: append([]byte("out-"), in.Value[3:]...)}}, nil
}

// running is a Transform's Run in the background.
type running struct {
	tf   *idemkafka.Transform
	stop context.CancelFunc
	done chan error
}

func start(t testing.TB, cfg idemkafka.TransformConfig, fn idemkafka.TransformFunc, hook func(worker int) bool) *running {
	t.Helper()
	tf, err := idemkafka.NewTransform(cfg, fn)
	if err != nil {
		t.Fatal(err)
	}
	if hook != nil {
		idemkafka.SetBeforeEnd(tf, hook)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{tf: tf, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- tf.Run(ctx) }()
	t.Cleanup(func() { r.wait(t) })
	return r
}

// wait stops r and returns Run's result (once; later calls return nil).
func (r *running) wait(t testing.TB) error {
	t.Helper()
	r.stop()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
		}
		return err
	case <-time.After(time.Minute):
		if f, err := os.CreateTemp("", "transform-hang-*.txt"); err == nil {
			_ = pprof.Lookup("goroutine").WriteTo(f, 2)
			t.Logf("goroutines in %s", f.Name())
			f.Close()
		}
		t.Fatal("Run did not return within a minute of its context ending")
		return nil
	}
}

// read returns how many times each value appears in topic for a reader with the
// isolation level, reading every partition to its end: the last stable offset for
// read_committed (what transactions committed), the high watermark otherwise.
func (e *txEnv) read(t testing.TB, topic string, committed bool) map[string]int {
	t.Helper()
	level := kgo.ReadUncommitted()
	if committed {
		level = kgo.ReadCommitted()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.c.ListenAddrs()...), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(level),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.KeepControlRecords(), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ends := endOffsets(ctx, t, cl, topic, committed)
	next := make(map[int32]int64)
	counts := make(map[string]int)
	for p, end := range ends {
		if end == 0 {
			next[p] = 0
		}
	}
	for !reached(next, ends) {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %v (at %v of %v)", topic, ctx.Err(), next, ends)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			next[r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				counts[string(r.Value)]++
			}
		})
	}
	return counts
}

func reached(next, ends map[int32]int64) bool {
	for p, end := range ends {
		if next[p] < end {
			return false
		}
	}
	return true
}

// endOffsets lists each partition's end: the last stable offset, or the high watermark.
func endOffsets(ctx context.Context, t testing.TB, cl *kgo.Client, topic string, committed bool) map[int32]int64 {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	if committed {
		req.IsolationLevel = 1
	}
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for p := range int32(txPartitions) {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = p
		rp.Timestamp = -1 // latest
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("ListOffsets: %v", err)
	}
	out := make(map[int32]int64)
	for _, rt := range resp.Topics {
		for _, p := range rt.Partitions {
			if p.ErrorCode != 0 {
				t.Fatalf("ListOffsets %s/%d: error code %d", topic, p.Partition, p.ErrorCode)
			}
			out[p.Partition] = p.Offset
		}
	}
	return out
}

// exactlyOnce fails t unless counts holds "out-%05d" for 0..n-1 once each, and nothing else.
func exactlyOnce(t testing.TB, counts map[string]int, n int) {
	t.Helper()
	var missing, doubled []string
	for i := range n {
		switch c := counts[fmt.Sprintf("out-%05d", i)]; {
		case c == 0:
			missing = append(missing, fmt.Sprint(i))
		case c > 1:
			doubled = append(doubled, fmt.Sprintf("%d×%d", i, c))
		}
	}
	if len(missing) > 0 || len(doubled) > 0 || len(counts) != n {
		t.Fatalf("read_committed output is not exactly once: %d distinct values for %d inputs, missing %d %.200v, doubled %d %.200v",
			len(counts), n, len(missing), missing, len(doubled), doubled)
	}
}

// total is the sum of the counts.
func total(counts map[string]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

// committedSum is the consumed records committed by all of rs.
func committedSum(rs ...*running) int64 {
	var n int64
	for _, r := range rs {
		n += r.tf.Committed()
	}
	return n
}

var errTransient = errors.New("transient failure")
