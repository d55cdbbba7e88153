package idempubsub

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/googleapis/gax-go/v2/apierror"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/brokerkit"
)

var (
	// ErrInvalidAckID is returned by Ack or Nak on an exactly-once subscription when
	// Pub/Sub answers PERMANENT_FAILURE_INVALID_ACK_ID: the delivery's ack ID
	// expired (its deadline passed, or it was redelivered meanwhile), so the settle
	// did not take and the message is, or will be, delivered again. It is final;
	// the inbox recognises the redelivery by its ID.
	ErrInvalidAckID = errors.New("idempubsub: Pub/Sub refused the ack ID as expired (PERMANENT_FAILURE_INVALID_ACK_ID); the message is delivered again")

	// ErrSettled is idem.ErrSettled, which a second Ack or Nak of one delivery
	// returns on every adapter.
	//
	// Deprecated: use idem.ErrSettled.
	ErrSettled = idem.ErrSettled
)

// Reasons Pub/Sub puts in the ErrorInfo metadata of an Acknowledge or
// ModifyAckDeadline on an exactly-once subscription, per ack ID.
const (
	reasonInvalidAckID = "PERMANENT_FAILURE_INVALID_ACK_ID"
	transientPrefix    = "TRANSIENT_"
	transientRetries   = 5
)

var _ idem.Settler = (*settler)(nil)

// settler settles one delivery.
type settler struct {
	src      *Source
	ackID    string
	msgID    string
	position string // Delivery.Position: "message <id>"
	once     brokerkit.Once
}

// Ack acknowledges the message with an Acknowledge request and waits for its
// answer. On an exactly-once subscription a nil error means Pub/Sub confirmed the
// ack and will not deliver the message again; an expired ack ID is
// ErrInvalidAckID. Elsewhere Pub/Sub's acks are best effort: a nil error means the
// request was accepted, and the message may still (rarely) come back, which the
// inbox's dedup makes harmless.
func (st *settler) Ack(ctx context.Context) error {
	if !st.once.Begin() {
		return brokerkit.Settled("idempubsub", "ack", st.position)
	}
	err := st.ack(ctx)
	if err != nil {
		st.once.Undo()
	}
	return err
}

func (st *settler) ack(ctx context.Context) error {
	st.src.release(st.ackID)
	// First in one Acknowledge request with the acks of other deliveries made
	// meanwhile; where that request's answer is not a clear yes or no for this ack
	// ID, again on its own, with retries.
	if sent, err := st.src.batchAck(ctx, st.ackID); sent {
		switch reason := ackFailure(err, st.ackID); {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("idempubsub: ack of message %s: %w", st.msgID, ctx.Err())
		case reason != "" && !strings.HasPrefix(reason, transientPrefix):
			return st.src.settleError("ack", st, err, reason)
		}
	}
	return st.src.settle(ctx, "ack", st, func(ctx context.Context) error {
		return st.src.client.SubscriptionAdminClient.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: st.src.sub, AckIds: []string{st.ackID}})
	})
}

// Nak sets the message's ack deadline to delay, rounded up to whole seconds and
// capped at 600 s (Pub/Sub's limit): Pub/Sub itself withholds the message that
// long, then delivers it again, to any consumer. delay <= 0 gives it back at once.
func (st *settler) Nak(ctx context.Context, delay time.Duration) error {
	if err := st.once.Claim(ctx, "idempubsub", "nak", st.position); err != nil {
		return err
	}
	st.src.release(st.ackID)
	secs := nakSeconds(delay)
	err := st.src.settle(ctx, "nak", st, func(ctx context.Context) error {
		return st.src.client.SubscriptionAdminClient.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{
			Subscription: st.src.sub, AckIds: []string{st.ackID}, AckDeadlineSeconds: secs})
	})
	if err != nil {
		st.once.Undo()
	}
	return err
}

// nakSeconds is delay as an ack deadline: whole seconds, rounded up so a backoff
// is never shortened to nothing, within 0..600.
func nakSeconds(delay time.Duration) int32 {
	if delay <= 0 {
		return 0
	}
	return int32(min((delay+time.Second-1)/time.Second, maxModAckSecs))
}

// settle runs one Acknowledge or ModifyAckDeadline for st and reads Pub/Sub's
// per-ack-ID answer: transient failures are retried (a few times, within ctx),
// an expired ack ID is ErrInvalidAckID, anything else a *idem.BackendError.
func (s *Source) settle(ctx context.Context, op string, st *settler, call func(context.Context) error) error {
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := call(ctx)
		if err == nil {
			return nil
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("idempubsub: %s of message %s: %w", op, st.msgID, ctxErr)
		}
		reason := ackFailure(err, st.ackID)
		switch {
		case strings.HasPrefix(reason, transientPrefix) && attempt < transientRetries:
			select {
			case <-time.After(backoff):
				backoff *= 2
				continue
			case <-ctx.Done():
				return fmt.Errorf("idempubsub: %s of message %s: %w", op, st.msgID, ctx.Err())
			}
		}
		return s.settleError(op, st, err, reason)
	}
}

// settleError is the final error of a settle Pub/Sub refused for reason (or
// without one).
func (s *Source) settleError(op string, st *settler, err error, reason string) error {
	switch reason {
	case "":
	case reasonInvalidAckID:
		return fmt.Errorf("idempubsub: %s of message %s: %w", op, st.msgID, ErrInvalidAckID)
	default:
		err = fmt.Errorf("Pub/Sub answered %s for the ack ID: %w", reason, err)
	}
	return &idem.BackendError{Backend: backend, Op: op, Err: fmt.Errorf("message %s on %q: %w", st.msgID, s.sub, err)}
}

// ackFailure is the reason Pub/Sub gave for ackID in the ErrorInfo of err (only
// exactly-once subscriptions give one), or "".
func ackFailure(err error, ackID string) string {
	apiErr, ok := apierror.FromError(err)
	if !ok {
		return ""
	}
	return apiErr.Metadata()[ackID]
}

// ackRequest is one Ack waiting for the ack loop.
type ackRequest struct {
	ackID string
	done  chan error // the answer of the Acknowledge request that carried it
}

// batchAck hands ackID to the ack loop and waits for the answer of the request
// that carried it. sent is false when the source is closed (the caller acks on its
// own) or ctx ended first.
func (s *Source) batchAck(ctx context.Context, ackID string) (sent bool, err error) {
	req := &ackRequest{ackID: ackID, done: make(chan error, 1)}
	s.ackMu.RLock()
	if s.ackClosed {
		s.ackMu.RUnlock()
		return false, nil
	}
	select {
	case s.ackq <- req:
	case <-ctx.Done():
		s.ackMu.RUnlock()
		return true, ctx.Err()
	}
	s.ackMu.RUnlock()
	select {
	case err := <-req.done:
		return true, err
	case <-ctx.Done():
		return true, ctx.Err()
	}
}

// ackLoop sends the queued acks, as many as are waiting (up to 1,000) in one
// Acknowledge request: while one request is on its way, the acks made meanwhile
// gather for the next. Concurrent acks (the inbox settles a batch 16 at a time)
// share requests; a lone ack goes at once.
func (s *Source) ackLoop() {
	defer s.ackWG.Done()
	for first := range s.ackq {
		reqs := []*ackRequest{first}
	gather:
		for len(reqs) < maxAckIDs {
			select {
			case r, ok := <-s.ackq:
				if !ok {
					break gather
				}
				reqs = append(reqs, r)
			default:
				break gather
			}
		}
		ids := make([]string, len(reqs))
		for i, r := range reqs {
			ids[i] = r.ackID
		}
		ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
		err := s.client.SubscriptionAdminClient.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: s.sub, AckIds: ids})
		cancel()
		for _, r := range reqs {
			r.done <- err
		}
	}
}

// ackTimeout bounds one batched Acknowledge request.
const ackTimeout = 30 * time.Second
