package idemtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
)

// testBrokerSettleTwice: a delivery is settled once. A second Ack or Nak returns
// idem.ErrSettled (not retryable) and does nothing: an acknowledged message is not
// redelivered by a Nak after its Ack.
func testBrokerSettleTwice(t *testing.T, env BrokerEnv) {
	Publish(t, env.Sink, brokerMsg(env, 1), brokerMsg(env, 2))
	src := env.NewSource(t)
	got := ReceiveN(t, src, 2)
	ctx := context.Background()
	acked, naked := got[0], got[1]
	Ack(t, acked)
	for op, err := range map[string]error{
		"Ack after Ack": acked.Settler.Ack(ctx),
		"Nak after Ack": acked.Settler.Nak(ctx, 0),
	} {
		if !errors.Is(err, idem.ErrSettled) || idem.IsRetryable(err) {
			t.Errorf("%s of %s = %v, want idem.ErrSettled", op, acked.ID, err)
		}
	}
	if err := naked.Settler.Nak(ctx, 0); err != nil {
		t.Fatalf("Nak: %v", err)
	}
	if err := naked.Settler.Ack(ctx); !errors.Is(err, idem.ErrSettled) {
		t.Errorf("Ack after Nak of %s = %v, want idem.ErrSettled", naked.ID, err)
	}
	again := Receive(t, src, 1, env.wait())
	if len(again) != 1 || again[0].ID != naked.ID {
		t.Fatalf("after Nak and a refused Ack, received %v; want %s again", ids(again), naked.ID)
	}
	Ack(t, again...)
}

// testBrokerDelayedNak checks DelayedNak by progress, not by the clock: a message
// Nak'ed for an hour does not come back while a later message (under another
// ordering key, so that no FIFO group waits for it) is published, received and
// acknowledged, nor in the Receive after that.
func testBrokerDelayedNak(t *testing.T, env BrokerEnv) {
	if !env.Features.DelayedNak {
		t.Skip("the adapter does not promise delayed Naks")
	}
	held := brokerMsg(env, 1)
	Publish(t, env.Sink, held)
	src := env.NewSource(t)
	got := ReceiveN(t, src, 1)
	if err := got[0].Settler.Nak(context.Background(), time.Hour); err != nil {
		t.Fatalf("Nak(1h): %v", err)
	}
	marker := brokerMsg(env, 2)
	marker.OrderingKey = "other"
	Publish(t, env.Sink, marker)
	for seen := false; !seen; {
		ds := Receive(t, src, 1, env.wait())
		if len(ds) == 0 {
			t.Fatalf("the message published after the Nak did not arrive")
		}
		for _, d := range ds {
			if d.ID == held.ID {
				t.Fatalf("%s Nak'ed for an hour came back before the message published after it", held.ID)
			}
			seen = seen || d.ID == marker.ID
		}
		Ack(t, ds...)
	}
	if extra := Receive(t, src, 1, 2*time.Second); len(extra) != 0 {
		t.Fatalf("%s Nak'ed for an hour came back with %v", held.ID, ids(extra))
	}
}

// testBrokerAttempts: where the broker counts deliveries, each Nak adds one.
func testBrokerAttempts(t *testing.T, env BrokerEnv) {
	if !env.Features.Attempts {
		t.Skip("the adapter does not promise delivery counts")
	}
	Publish(t, env.Sink, brokerMsg(env, 1))
	src := env.NewSource(t)
	for want := 1; want <= 3; want++ {
		ds := Receive(t, src, 1, env.wait())
		if len(ds) != 1 {
			t.Fatalf("delivery %d did not arrive", want)
		}
		if ds[0].Attempt != want {
			t.Fatalf("delivery %d of %s has Attempt %d", want, ds[0].ID, ds[0].Attempt)
		}
		settle := func(d idem.Delivery) error { return d.Settler.Nak(context.Background(), 0) }
		if want == 3 {
			settle = func(d idem.Delivery) error { return d.Settler.Ack(context.Background()) }
		}
		if err := settle(ds[0]); err != nil {
			t.Fatalf("settle delivery %d: %v", want, err)
		}
	}
}

// testBrokerCloseUnsettled: a source closed with deliveries unsettled loses none
// of them: a new source receives each again. Settling the old deliveries after
// Close may fail but must not panic.
func testBrokerCloseUnsettled(t *testing.T, env BrokerEnv) {
	const n = 3
	msgs := make([]idem.Message, n)
	for i := range msgs {
		msgs[i] = brokerMsg(env, i)
		msgs[i].OrderingKey = fmt.Sprint("k", i) // one per FIFO group: none waits for another
	}
	Publish(t, env.Sink, msgs...)
	first := env.NewSource(t)
	got := Receive(t, first, n, env.wait())
	if len(got) != n {
		t.Fatalf("received %d of %d", len(got), n)
	}
	if err := first.Close(); err != nil {
		t.Fatalf("Close with %d deliveries unsettled: %v", n, err)
	}
	second := env.NewSource(t)
	again := Receive(t, second, n, env.wait())
	Ack(t, again...)
	if want := ids(got); !sameSet(ids(again), want) {
		t.Fatalf("after Close with everything unsettled, a new source received %v; want %v", ids(again), want)
	}
	for _, d := range got { // the old handles: an error is fine, a panic is not
		_ = d.Settler.Ack(context.Background())
	}
}

// testBrokerConcurrentReceive: Receive called from several goroutines at once on
// one source hands out each message once.
func testBrokerConcurrentReceive(t *testing.T, env BrokerEnv) {
	const n, workers = 40, 4
	msgs := make([]idem.Message, n)
	for i := range msgs {
		msgs[i] = brokerMsg(env, i)
		msgs[i].OrderingKey = fmt.Sprint("k", i%workers)
	}
	Publish(t, env.Sink, msgs...)
	src := env.NewSource(t)
	ctx, cancel := context.WithTimeout(context.Background(), env.wait())
	defer cancel()
	var mu sync.Mutex
	seen := map[string]int{}
	var errs []error
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				ds, err := src.Receive(ctx, 5)
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
						cancel()
					}
					return
				}
				mu.Lock()
				for _, d := range ds {
					seen[d.ID]++
					if err := d.Settler.Ack(context.Background()); err != nil {
						errs = append(errs, fmt.Errorf("Ack %s: %w", d.ID, err))
					}
				}
				if len(seen) == n {
					cancel()
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if seen[m.ID] != 1 {
			t.Errorf("%s was received %d times by %d concurrent Receive loops, want once", m.ID, seen[m.ID], workers)
		}
	}
}

// sameSet reports whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	count := map[string]int{}
	for _, s := range a {
		count[s]++
	}
	for _, s := range b {
		if count[s]--; count[s] < 0 {
			return false
		}
	}
	return true
}
