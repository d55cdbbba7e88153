package idemnats

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	_ idem.Sink            = (*Sink)(nil)
	_ idem.FeatureReporter = (*Sink)(nil)
)

// Sink publishes idem messages to JetStream: subject Message.Topic, header
// Nats-Msg-Id = Message.ID, so the stream drops a republished message within its
// Duplicates window. Publish returns once the stream has stored (acknowledged) every
// message. A Sink is safe for concurrent use.
type Sink struct {
	js  jetstream.JetStream
	cfg SinkConfig
}

// NewSink returns a Sink publishing through js (jetstream.New(nc)). The subjects it
// publishes to must belong to a stream (see EnsureStream); the connection stays the
// caller's to close.
func NewSink(js jetstream.JetStream, cfg SinkConfig) (*Sink, error) {
	if js == nil {
		return nil, &idem.InputError{Field: "js", Reason: "is nil", Fix: "pass jetstream.New(nc)"}
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Sink{js: js, cfg: cfg}, nil
}

// Features reports what JetStream guarantees to idem; see the package documentation
// for the conditions of each.
func (s *Sink) Features() idem.Features { return features() }

// MessagingSystem is the messaging.system of the spans of the outbox relay and the
// inbox that use it: "nats".
func (s *Sink) MessagingSystem() string { return "nats" }

// features is shared by Sink and Source: both ends of one JetStream stream.
func features() idem.Features {
	return idem.Features{Dedup: true, OrderedPerKey: true, DelayedNak: true, Attempts: true}
}

// Publish validates every message first (nothing is sent if one is bad), then
// publishes them in order and waits for each PubAck. A message the stream
// recognises as a duplicate is acknowledged as such and counts as published.
// On a failure, messages before the failed one are stored; later ones may be too.
func (s *Sink) Publish(ctx context.Context, msgs ...idem.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	out := make([]*nats.Msg, len(msgs))
	maxPayload := s.js.Conn().MaxPayload()
	for i, m := range msgs {
		nm, err := toNATS(m, maxPayload)
		if err != nil {
			if len(msgs) > 1 {
				return fmt.Errorf("message %d of the batch: %w", i, err)
			}
			return err
		}
		out[i] = nm
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.js.Conn().IsClosed() {
		// Checked here because the async path reports it without wrapping.
		return s.fail(ctx, 0, len(out), out[0], nats.ErrConnectionClosed)
	}
	if len(out) == 1 || s.cfg.MaxInFlight == 1 {
		return s.publishSync(ctx, out)
	}
	return s.publishAsync(ctx, out)
}

// publishSync publishes one message at a time: the fastest for one message (no
// async reply bookkeeping) and strictly ordered for many.
func (s *Sink) publishSync(ctx context.Context, msgs []*nats.Msg) error {
	for i, m := range msgs {
		if _, err := s.js.PublishMsg(ctx, m); err != nil {
			return s.fail(ctx, i, len(msgs), m, err)
		}
	}
	return nil
}

// publishAsync pipelines up to MaxInFlight messages and waits for their PubAcks in
// order. The client's retry on "no responders" is off: it would re-send a message
// after later ones and break the order; the caller's retry of the whole call is
// safe instead, since the stream deduplicates what was already stored.
func (s *Sink) publishAsync(ctx context.Context, msgs []*nats.Msg) error {
	wait := s.js.Options().DefaultTimeout
	opts := []jetstream.PublishOpt{jetstream.WithRetryAttempts(0), jetstream.WithStallWait(wait)}
	// Without a ctx deadline, a PubAck may take at most the JetStream context's
	// DefaultTimeout after the previous one, as a synchronous publish would.
	var stuck *time.Timer
	if _, ok := ctx.Deadline(); !ok {
		stuck = time.NewTimer(wait)
		defer stuck.Stop()
	}
	// await waits for one PubAck; resolved is false when ctx ended or the PubAck
	// is late, and the future may still be outstanding.
	await := func(f jetstream.PubAckFuture) (resolved bool, err error) {
		select {
		case <-f.Ok():
			if stuck != nil {
				stuck.Reset(wait)
			}
			return true, nil
		case err := <-f.Err():
			return true, err
		case <-ctx.Done():
			return false, ctx.Err()
		case <-timeoutOf(stuck):
			return false, fmt.Errorf("no PubAck within %v: %w", wait, nats.ErrTimeout)
		}
	}
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	done := 0 // futures[:done] are acknowledged
	// settle confirms futures[done:upTo] in order and reports the first failure.
	// It waits for the last of them first: PubAcks come back in publish order, so
	// the others are in by then, and the goroutine sleeps once per window instead
	// of once per message. (Each future's channels yield once, hence the care.)
	settle := func(upTo int) error {
		resolved, lastErr := await(futures[upTo-1])
		for ; done < upTo-1; done++ {
			if !resolved { // name the first message not known to be stored
				return s.fail(ctx, done, len(msgs), futures[done].Msg(), lastErr)
			}
			if _, err := await(futures[done]); err != nil {
				return s.fail(ctx, done, len(msgs), futures[done].Msg(), err)
			}
		}
		if lastErr != nil {
			return s.fail(ctx, done, len(msgs), futures[done].Msg(), lastErr)
		}
		done = upTo
		return nil
	}
	for i, m := range msgs {
		if i-done >= s.cfg.MaxInFlight {
			if err := settle(done + max(1, s.cfg.MaxInFlight/2)); err != nil {
				return err
			}
		}
		f, err := s.js.PublishMsgAsync(m, opts...)
		if err != nil {
			return s.fail(ctx, i, len(msgs), m, err)
		}
		futures = append(futures, f)
	}
	return settle(len(futures))
}

// timeoutOf is t's channel, or nil (never ready) without a timer.
func timeoutOf(t *time.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C
}

// fail describes the failure of message i of n. The caller's cancellation is
// returned as such; anything else is a *idem.BackendError.
func (s *Sink) fail(ctx context.Context, i, n int, m *nats.Msg, err error) error {
	where := fmt.Sprintf("message %d of %d (ID %q, subject %q)", i, n, m.Header.Get(jetstream.MsgIDHeader), m.Subject)
	if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		return fmt.Errorf("idemnats: publish stopped at %s: %w", where, err)
	}
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		err = fmt.Errorf("%w (is the subject captured by a stream? create one with idemnats.EnsureStream)", err)
	}
	return &idem.BackendError{Backend: backend, Op: "publish", Err: fmt.Errorf("%s: %w", where, err)}
}
