package idemnats

import (
	"context"
	"errors"
	"time"

	"github.com/idemhq/idem/internal/wait"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// What a client sees while a JetStream cluster elects a leader (a node killed,
// routes cut), and what idemnats retries:
//
//   - a publish's PubAck does not come (nats: timeout): the message may be stored
//     or not; publishing it again with the same Nats-Msg-Id is deduplicated by the
//     stream within its Duplicates window, so the Sink retries.
//   - no responders: the stream has no leader listening on its subjects for a
//     moment. Retried, unless the meta leader says no stream captures the subject
//     (a mistake, reported at once with the fix).
//   - "JetStream system temporarily unavailable" and other 503 API errors: no meta
//     or stream leader yet. Retried.
//   - "duplicate message id is in process" (409): the retry of a publish whose
//     PubAck was lost reached a leader still proposing the first copy. Retried:
//     once that copy is stored, the retry is answered as a duplicate.
//   - the connection reconnecting to another node. Retried; a closed connection
//     is not. A synchronous publish or an ack whose connection was lost while it
//     waited for its reply is retried as soon as the client has reconnected
//     (connWatch), not after its timeout: that reply went down with the
//     connection.
//   - an Ack (double ack) not confirmed: it may have been applied; acking again is
//     harmless (acks are idempotent on the consumer), so it is retried within
//     AckWait. A delivery whose ack was lost entirely comes back: the inbox's
//     dedup drops it.
//   - a pull request ended by "leadership change", "server shutdown" (its node
//     killed) or missed heartbeats: the Source asks again.
//
// Retries back off from retryFirst to retryMax and stop after the configured
// budget (SinkConfig.RetryTimeout, AckWait for acks); the last error is returned.

// jsDuplicateInProcess is the server's JSStreamDuplicateMessageConflict (409,
// "duplicate message id is in process"); nats.go has no constant for it.
const jsDuplicateInProcess jetstream.ErrorCode = 10158

const (
	retryFirst = 25 * time.Millisecond
	retryMax   = time.Second
)

// transient reports whether err is one of the failures of a leader election or a
// reconnect, which the same call may not hit again in a moment. The caller's own
// cancellation is never transient.
func transient(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, jetstream.ErrMsgAlreadyAckd):
		return false
	case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, jetstream.ErrAsyncPublishTimeout),
		errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, nats.ErrStaleConnection),
		errors.Is(err, jetstream.ErrConsumerLeadershipChanged), errors.Is(err, jetstream.ErrNoHeartbeat),
		errors.Is(err, jetstream.ErrServerShutdown):
		return true
	case errors.As(err, &apiErr):
		// 503: JetStream system temporarily unavailable, no leader. 409 with
		// jsDuplicateInProcess: the same Nats-Msg-Id is being stored.
		return apiErr.Code == 503 || apiErr.ErrorCode == jsDuplicateInProcess
	}
	return false
}

// backoff paces the retries of one call within a budget.
type backoff struct {
	next     time.Duration
	deadline time.Time
	tries    int
}

func newBackoff(budget time.Duration) *backoff {
	return &backoff{next: retryFirst, deadline: time.Now().Add(budget)}
}

// wait sleeps before the next try and reports whether to make it: false when the
// budget is spent or ctx ended.
func (b *backoff) wait(ctx context.Context) bool {
	d := b.next
	if left := time.Until(b.deadline); left <= 0 {
		return false
	} else if d > left {
		d = left
	}
	b.next = min(2*b.next, retryMax)
	b.tries++
	return wait.Sleep(ctx, d)
}

// retryTransient runs op until it succeeds, fails for good, or the election
// retries took DefaultRetryTimeout: for the API calls (create a stream or a
// consumer) a service makes at start-up, when the cluster may be electing. Each
// try is bounded by try: a request lost in an election gets no answer, and
// waiting for ctx's deadline would spend the whole budget on it.
func retryTransient(ctx context.Context, try time.Duration, op func(ctx context.Context) error) error {
	var retry *backoff
	for {
		tryCtx, cancel := context.WithTimeout(ctx, try)
		err := op(tryCtx)
		cancel()
		if err == nil {
			return nil
		}
		if retry == nil {
			retry = newBackoff(DefaultRetryTimeout)
		}
		if !transient(ctx, err) || !retry.wait(ctx) {
			return err
		}
	}
}
