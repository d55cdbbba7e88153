package idemnats

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/brokerkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var _ brokerkit.Sink = (*Sink)(nil)

// Sink publishes idem messages to JetStream: subject Message.Topic, header
// Nats-Msg-Id = Message.ID, so the stream drops a republished message within its
// Duplicates window. Publish returns once the stream has stored (acknowledged) every
// message. A Sink is safe for concurrent use.
type Sink struct {
	js       jetstream.JetStream
	cfg      SinkConfig
	watch    *connWatch
	verified verifier // DedupForever: topics whose stream was checked
}

// NewSink returns a Sink publishing through js (jetstream.New(nc)). The subjects it
// publishes to must belong to a stream (see EnsureStream); the connection stays the
// caller's to close.
func NewSink(js jetstream.JetStream, cfg SinkConfig) (*Sink, error) {
	cfg, err := brokerkit.Setup(js == nil, "js", "pass jetstream.New(nc)", cfg, SinkConfig.withDefaults)
	if err != nil {
		return nil, err
	}
	return &Sink{js: js, cfg: cfg, watch: watchConn(js.Conn())}, nil
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
// What a leader election shows the client (a PubAck timeout, no responders, a
// 503 from JetStream) is retried from the first message not known to be stored,
// with backoff, for up to SinkConfig.RetryTimeout: the stream deduplicates what
// was stored already. On a failure, messages before the failed one are stored;
// later ones may be too.
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
	if s.cfg.Dedup == DedupForever {
		for i, m := range msgs {
			out[i].Subject = IDSubject(m.Topic, m.ID)
			if err := s.verified.check(ctx, s.js, m.Topic, out[i].Subject); err != nil {
				return err
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.js.Conn().IsClosed() {
		// Checked here because the async path reports it without wrapping.
		return s.fail(ctx, 0, len(out), out[0], nats.ErrConnectionClosed)
	}
	var retry *backoff
	for start := 0; ; {
		var i int
		var err error
		if len(out)-start == 1 || s.cfg.MaxInFlight == 1 {
			i, err = s.publishSync(ctx, out[start:])
		} else {
			i, err = s.publishAsync(ctx, out[start:])
		}
		if err == nil {
			return nil
		}
		start += i
		if retry == nil {
			retry = newBackoff(s.cfg.RetryTimeout)
		}
		if !s.retryable(ctx, out[start], err) || !retry.wait(ctx) {
			if retry.tries > 0 {
				err = fmt.Errorf("%w (after %d retries)", err, retry.tries)
			}
			return s.fail(ctx, start, len(out), out[start], err)
		}
	}
}

// retryable reports whether publishing m again may succeed. No responders is a
// leader election only if a stream captures m's subject: the meta leader is asked,
// so a missing stream is reported at once rather than after RetryTimeout.
func (s *Sink) retryable(ctx context.Context, m *nats.Msg, err error) bool {
	if s.cfg.RetryTimeout < 0 || !transient(ctx, err) {
		return false
	}
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		lookup, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if _, err := s.js.StreamNameBySubject(lookup, m.Subject); errors.Is(err, jetstream.ErrStreamNotFound) {
			return false
		}
	}
	return true
}

// publishSync publishes one message at a time: the fastest for one message (no
// async reply bookkeeping) and strictly ordered for many. It returns the index of
// the message that failed.
func (s *Sink) publishSync(ctx context.Context, msgs []*nats.Msg) (int, error) {
	wait := s.js.Options().DefaultTimeout
	for i, m := range msgs {
		// A PubAck lost in a leader election never comes: wait for it at most
		// DefaultTimeout, then retry, rather than until ctx's (later) deadline.
		// One lost with its connection is retried at once (connWatch).
		err := s.watch.request(ctx, wait, func(ctx context.Context) error {
			_, err := s.js.PublishMsg(ctx, m)
			return err
		})
		if err != nil && !s.duplicate(err) {
			return i, err
		}
	}
	return 0, nil
}

// duplicate reports whether err is a DedupForever stream refusing a message whose
// ID it holds: the message is stored, once.
func (s *Sink) duplicate(err error) bool {
	return s.cfg.Dedup == DedupForever && isSubjectTaken(err)
}

// message is m as published: validated, on its ID's subject for DedupForever
// (whose stream is verified on first use of the topic).
func (s *Sink) message(ctx context.Context, m idem.Message) (*nats.Msg, error) {
	nm, err := toNATS(m, s.js.Conn().MaxPayload())
	if err != nil {
		return nil, err
	}
	if s.cfg.Dedup == DedupForever {
		nm.Subject = IDSubject(m.Topic, m.ID)
		if err := s.verified.check(ctx, s.js, m.Topic, nm.Subject); err != nil {
			return nil, err
		}
	}
	return nm, nil
}

// publishAsync pipelines up to MaxInFlight messages and waits for their PubAcks in
// order; it returns the index of the first message not known to be stored. The
// client's retry on "no responders" is off: it would re-send a message after later
// ones and break the order; Publish retries from the first unconfirmed message
// instead, which is safe since the stream deduplicates what was already stored.
func (s *Sink) publishAsync(ctx context.Context, msgs []*nats.Msg) (int, error) {
	wait := s.js.Options().DefaultTimeout
	opts := []jetstream.PublishOpt{jetstream.WithRetryAttempts(0), jetstream.WithStallWait(wait)}
	// A PubAck may take at most the JetStream context's DefaultTimeout after the
	// previous one, as a synchronous publish would: one lost in a leader election
	// never comes, and Publish retries from there.
	stuck := time.NewTimer(wait)
	defer stuck.Stop()
	// await waits for one PubAck; resolved is false when ctx ended or the PubAck
	// is late, and the future may still be outstanding.
	await := func(f jetstream.PubAckFuture) (resolved bool, err error) {
		select {
		case <-f.Ok():
			stuck.Reset(wait)
			return true, nil
		case err := <-f.Err():
			if s.duplicate(err) {
				if stuck != nil {
					stuck.Reset(wait)
				}
				return true, nil
			}
			return true, err
		case <-ctx.Done():
			return false, ctx.Err()
		case <-stuck.C:
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
				return lastErr
			}
			if _, err := await(futures[done]); err != nil {
				return err
			}
		}
		if lastErr != nil {
			return lastErr
		}
		done = upTo
		return nil
	}
	for i, m := range msgs {
		if i-done >= s.cfg.MaxInFlight {
			if err := settle(done + max(1, s.cfg.MaxInFlight/2)); err != nil {
				return done, err
			}
		}
		f, err := s.js.PublishMsgAsync(m, opts...)
		if err != nil {
			if len(futures) > done {
				if settleErr := settle(len(futures)); settleErr != nil {
					return done, settleErr
				}
			}
			return i, err
		}
		futures = append(futures, f)
	}
	if err := settle(len(futures)); err != nil {
		return done, err
	}
	return 0, nil
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
