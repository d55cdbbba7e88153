package idemnats_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idemnats/natsserver"
	"github.com/idemhq/idem/internal/testsvc"
)

// clusterJS starts a 3-node cluster and connects a client to all its nodes, with
// an R3 stream over "orders.>".
func clusterJS(t *testing.T) (*natsserver.Cluster, jetstream.JetStream) {
	t.Helper()
	ctx := context.Background()
	c, err := natsserver.StartCluster(ctx, natsserver.ClusterConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	nc, err := nats.Connect(c.ClientURLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js := jsOf(t, nc)
	if _, err := idemnats.EnsureStream(ctx, js, idemnats.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	return c, js
}

// publishLoop publishes batches of n messages (singles and pipelined batches)
// until stop is closed, and returns the IDs whose Publish succeeded and the
// errors of the others.
func publishLoop(sink *idemnats.Sink, stop <-chan struct{}) (acked []string, errs []error) {
	for b := 0; ; b++ {
		select {
		case <-stop:
			return acked, errs
		default:
		}
		size := 1 + b%8*5
		batch := make([]idem.Message, size)
		for i := range batch {
			batch[i] = idem.Message{ID: fmt.Sprintf("b%d-%d", b, i), Topic: "orders.created", Payload: []byte("x")}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := sink.Publish(ctx, batch...)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, m := range batch {
			acked = append(acked, m.ID)
		}
	}
}

// publishing runs publishLoop on sink in the background until the returned stop is
// called, which returns what the loop returned.
func publishing(sink *idemnats.Sink) (stop func() (acked []string, errs []error)) {
	quit := make(chan struct{})
	type result struct {
		acked []string
		errs  []error
	}
	done := make(chan result, 1)
	go func() {
		acked, errs := publishLoop(sink, quit)
		done <- result{acked, errs}
	}()
	return func() ([]string, []error) {
		close(quit)
		r := <-done
		return r.acked, r.errs
	}
}

// checkOnce reads the whole stream and fails t unless every acked ID is in it
// exactly once (and no ID at all is in it twice).
func checkOnce(t *testing.T, js jetstream.JetStream, acked []string) {
	t.Helper()
	var seen map[string]int
	var err error
	// The cluster may still be electing after the last restart: read again.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if seen, err = readStream(js); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("read the stream back: %v", err)
		}
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("%s is in the stream %d times", id, n)
		}
	}
	for _, id := range acked {
		if seen[id] != 1 {
			t.Errorf("%s was acknowledged by the sink but is in the stream %d times", id, seen[id])
		}
	}
	t.Logf("%d acknowledged, %d in the stream", len(acked), len(seen))
}

// TestClusterLeaderKilledDuringPublish: the stream leader is killed three times
// (and restarted) while a sink publishes; every message the sink acknowledged is
// in the stream exactly once, and every Publish succeeds: the sink retried what
// the elections showed it.
func TestClusterLeaderKilledDuringPublish(t *testing.T) {
	t.Parallel()
	c, js := clusterJS(t)
	sink := newSink(t, js, idemnats.SinkConfig{})
	stopPublishing := publishing(sink)
	for range 3 {
		time.Sleep(300 * time.Millisecond)
		leader := waitLeader(t, c)
		c.Kill(leader)
		time.Sleep(time.Second)
		if err := c.Restart(context.Background(), leader); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	acked, errs := stopPublishing()
	for _, err := range errs {
		t.Errorf("Publish during leader kills: %v", err)
	}
	if len(acked) == 0 {
		t.Fatal("nothing was published")
	}
	checkOnce(t, js, acked)
}

// TestClusterLeaderIsolated: the stream leader's routes are cut while a sink
// publishes through every node: the leader steps down, the others elect one, and
// no acknowledged message is lost or doubled.
func TestClusterLeaderIsolated(t *testing.T) {
	t.Parallel()
	c, js := clusterJS(t)
	sink := newSink(t, js, idemnats.SinkConfig{})
	stopPublishing := publishing(sink)
	time.Sleep(300 * time.Millisecond)
	c.Isolate(waitLeader(t, c), 3*time.Second)
	c.CutRoutes(0, 1, time.Second)
	time.Sleep(time.Second)
	acked, errs := stopPublishing()
	for _, err := range errs {
		t.Errorf("Publish during a partition: %v", err)
	}
	checkOnce(t, js, acked)
}

// waitLeader waits for the stream to have a leader and returns its node.
func waitLeader(t *testing.T, c *natsserver.Cluster) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if i := c.StreamLeader("ORDERS"); i >= 0 {
			return i
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no stream leader within 30s")
	return -1
}

// readStream counts the stream's messages by Nats-Msg-Id.
func readStream(js jetstream.JetStream) (map[string]int, error) {
	// Short: a request lost in an election gets no answer; the caller reads again.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "ORDERS")
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	seen := map[string]int{}
	for n := uint64(0); n < info.State.Msgs; {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("after %d of %d: %w", n, info.State.Msgs, ctx.Err())
		}
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		for m := range batch.Messages() {
			seen[m.Headers().Get(jetstream.MsgIDHeader)]++
			n++
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("after %d of %d: %w", n, info.State.Msgs, err)
		}
	}
	return seen, nil
}

// TestClusterConsumerLeaderKilled: the durable consumer's leader is killed twice
// and isolated once while a Source receives and acks. Receive rides out the
// elections (no error reaches the caller), every message is received, and in the
// end the consumer holds every message acknowledged: an ack left unconfirmed by
// an election was either applied or the message came back and was acked again.
// Each fault is injected when the consumer has received its share of the
// messages (faultAt), and a killed node restarts only after the consumer went on
// without it: mid-stream however fast the machine is.
func TestClusterConsumerLeaderKilled(t *testing.T) {
	t.Parallel()
	c, js := clusterJS(t)
	const n = 3000
	msgs := make([]idem.Message, n)
	for i := range msgs {
		msgs[i] = idem.Message{ID: fmt.Sprintf("m%d", i), Topic: "orders.created", Payload: []byte("x")}
	}
	publish(t, newSink(t, js, idemnats.SinkConfig{}), msgs...)
	src := openSource(t, js, idemnats.SourceConfig{Stream: "ORDERS", Durable: "billing", AckWait: 2 * time.Second})
	cons, err := js.Consumer(context.Background(), "ORDERS", "billing")
	if err != nil {
		t.Fatal(err)
	}

	received := map[string]bool{}
	var recvErrs, ackErrs []error
	var got atomic.Int64              // len(received), for the fault injector
	faultAt := []int{500, 1200, 1900} // kill, kill, isolate
	reached, injected := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for ctx.Err() == nil {
			rctx, rcancel := context.WithTimeout(ctx, time.Second)
			ds, err := src.Receive(rctx, 20)
			rcancel()
			if errors.Is(err, context.DeadlineExceeded) { // nothing to deliver: all acked?
				ictx, icancel := context.WithTimeout(ctx, 2*time.Second)
				info, err := cons.Info(ictx)
				icancel()
				if err == nil && len(received) == n && info.NumAckPending == 0 && info.NumPending == 0 {
					return
				}
				continue
			}
			if err != nil {
				recvErrs = append(recvErrs, err)
				continue
			}
			for _, d := range ds {
				received[d.ID] = true
				if err := d.Settler.Ack(ctx); err != nil {
					ackErrs = append(ackErrs, err)
				}
			}
			got.Store(int64(len(received)))
			if len(faultAt) > 0 && len(received) >= faultAt[0] {
				faultAt = faultAt[1:]
				reached <- struct{}{} // wait for the fault, then go on through it
				<-injected
			}
		}
		t.Errorf("the consumer did not settle within 2 minutes: %d of %d received", len(received), n)
	}()
	leader := func() int {
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if i := c.ConsumerLeader("ORDERS", "billing"); i >= 0 {
				return i
			}
		}
		t.Error("no consumer leader within 30s")
		return 0
	}
	for fault := range 3 {
		select {
		case <-reached:
		case <-done:
			t.Fatalf("the consumer ended before fault %d", fault+1)
		}
		i := leader()
		if fault == 2 {
			c.Isolate(i, 2*time.Second)
			injected <- struct{}{}
			break
		}
		c.Kill(i)
		from := got.Load()
		injected <- struct{}{}
		// The consumer goes on under a new leader before the node comes back.
		testsvc.Eventually(t, time.Minute, "the consumer to receive 200 more without the killed leader", func() bool {
			return got.Load() >= from+200
		})
		if err := c.Restart(context.Background(), i); err != nil {
			t.Fatal(err)
		}
	}
	<-done
	for _, err := range recvErrs {
		t.Errorf("Receive during consumer leader elections: %v", err)
	}
	for _, err := range ackErrs {
		if !idem.IsRetryable(err) || !strings.Contains(err.Error(), "not confirmed") {
			t.Errorf("Ack during consumer leader elections = %v, want a retryable error saying it is not confirmed", err)
		}
	}
	t.Logf("%d received, %d acks unconfirmed", len(received), len(ackErrs))
}
