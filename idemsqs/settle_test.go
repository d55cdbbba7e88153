package idemsqs

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsqs/sqsfake"
)

// gatedClient holds the first DeleteMessageBatch until the test opens the gate,
// and counts the calls and their entries.
type gatedClient struct {
	Client
	gate    chan struct{}
	first   atomic.Bool
	held    atomic.Int64 // entries of the held first call
	calls   atomic.Int64
	entries atomic.Int64
}

func (g *gatedClient) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	if g.first.CompareAndSwap(false, true) {
		g.held.Store(int64(len(in.Entries)))
		<-g.gate
	}
	g.calls.Add(1)
	g.entries.Add(int64(len(in.Entries)))
	return g.Client.DeleteMessageBatch(ctx, in, opts...)
}

// TestAcksBatched: acks that arrive while a delete is on its way go out together:
// 11 concurrent acks make 2 DeleteMessageBatch calls (whatever had queued when the
// first went out, then the rest), and each Ack returns once its message is deleted.
func TestAcksBatched(t *testing.T) {
	srv, err := sqsfake.Start(sqsfake.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	c := srv.Client()
	if _, err := EnsureQueue(ctx, c, "acks.fifo", QueueConfig{}); err != nil {
		t.Fatal(err)
	}
	sink, _ := NewSink(c, SinkConfig{})
	var msgs []idem.Message
	for i := range 11 {
		msgs = append(msgs, idem.Message{ID: string(rune('a' + i)), Topic: "acks.fifo", OrderingKey: string(rune('a' + i)), Payload: []byte("x")})
	}
	if err := sink.Publish(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	g := &gatedClient{Client: c, gate: make(chan struct{})}
	src, err := NewSource(ctx, g, SourceConfig{Queue: "acks.fifo"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var ds []idem.Delivery
	for len(ds) < 11 {
		got, err := src.Receive(ctx, 11-len(ds))
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, got...)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(ds))
	for _, d := range ds {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- d.Settler.Ack(ctx) }()
	}
	for { // the first delete is held; wait until every other ack queued behind it
		src.deletes.mu.Lock()
		n := len(src.deletes.pending)
		src.deletes.mu.Unlock()
		if held := g.held.Load(); held > 0 && int(held)+n == 11 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(g.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if g.calls.Load() != 2 || g.entries.Load() != 11 {
		t.Fatalf("11 acks made %d DeleteMessageBatch calls with %d entries, want 2 with 11", g.calls.Load(), g.entries.Load())
	}
}
