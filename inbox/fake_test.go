package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemhq/idem"
)

// fakeBroker is an in-memory at-least-once queue for the inbox's own tests: a message
// stays until acked, a nak or an unsettled delivery puts it back, and loseAcks makes
// the next acks fail after... nothing: the message is redelivered, as a lost ack is.
// The real brokers run the same flows in the adapters' tests.
type fakeBroker struct {
	mu       sync.Mutex
	cond     *sync.Cond
	queue    []fakeMsg
	inflight map[int]fakeMsg
	next     int
	acked    map[string]int // message id -> acks
	loseAcks int            // the next n acks are lost: the message comes back
	closed   bool
}

type fakeMsg struct {
	m       idem.Message
	attempt int
}

func newFakeBroker() *fakeBroker {
	b := &fakeBroker{inflight: map[int]fakeMsg{}, acked: map[string]int{}}
	b.cond = sync.NewCond(&b.mu)
	return b
}

func (b *fakeBroker) Publish(_ context.Context, msgs ...idem.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range msgs {
		b.queue = append(b.queue, fakeMsg{m: m})
	}
	b.cond.Broadcast()
	return nil
}

func (b *fakeBroker) Receive(ctx context.Context, max int) ([]idem.Delivery, error) {
	defer b.wakeWhenDone(ctx)()
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.queue) == 0 && !b.closed && ctx.Err() == nil {
		b.cond.Wait()
	}
	if b.closed {
		return nil, idem.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []idem.Delivery
	for len(b.queue) > 0 && len(out) < max {
		fm := b.queue[0]
		b.queue = b.queue[1:]
		fm.attempt++
		b.next++
		tag := b.next
		b.inflight[tag] = fm
		out = append(out, idem.Delivery{Message: fm.m, Attempt: fm.attempt,
			Position: fmt.Sprintf("tag %d", tag), Settler: fakeSettler{b, tag}})
	}
	return out, nil
}

func (b *fakeBroker) Close() error { return nil }

// requeueInflight puts every unsettled delivery back, as a broker does when its
// consumer dies.
func (b *fakeBroker) requeueInflight() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for tag, fm := range b.inflight {
		b.queue = append(b.queue, fm)
		delete(b.inflight, tag)
	}
	b.cond.Broadcast()
}

// waitSettled blocks until the broker holds nothing unsettled (every message
// acked), or ctx ends.
func (b *fakeBroker) waitSettled(ctx context.Context) error {
	defer b.wakeWhenDone(ctx)()
	b.mu.Lock()
	defer b.mu.Unlock()
	for (len(b.queue) > 0 || len(b.inflight) > 0) && ctx.Err() == nil {
		b.cond.Wait()
	}
	return ctx.Err()
}

// wakeWhenDone wakes the broker's waiters when ctx ends, until the returned
// stop is called.
func (b *fakeBroker) wakeWhenDone(ctx context.Context) (stop func() bool) {
	return context.AfterFunc(ctx, func() { b.mu.Lock(); b.cond.Broadcast(); b.mu.Unlock() })
}

type fakeSettler struct {
	b   *fakeBroker
	tag int
}

var errAckLost = errors.New("fake broker: ack lost")

func (s fakeSettler) Ack(context.Context) error {
	return s.settle(func(b *fakeBroker, fm fakeMsg) error {
		if b.loseAcks > 0 {
			b.loseAcks--
			b.queue = append(b.queue, fm)
			return errAckLost
		}
		b.acked[fm.m.ID]++
		return nil
	})
}

func (s fakeSettler) Nak(context.Context, time.Duration) error {
	return s.settle(func(b *fakeBroker, fm fakeMsg) error {
		b.queue = append(b.queue, fm)
		return nil
	})
}

// settle takes the delivery out of flight and calls then with the broker locked,
// to ack or requeue it.
func (s fakeSettler) settle(then func(b *fakeBroker, fm fakeMsg) error) error {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	fm, ok := b.inflight[s.tag]
	if !ok {
		return errors.New("fake broker: delivery already settled")
	}
	delete(b.inflight, s.tag)
	b.cond.Broadcast() // it comes back to the queue, or nothing may be unsettled
	return then(b, fm)
}
