package idempubsub

import (
	"context"
	"errors"
	"fmt"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/brokerkit"
)

var _ brokerkit.Sink = (*Sink)(nil)

// Sink publishes idem messages to Pub/Sub topics: topic Message.Topic (an ID in the
// client's project or a full name), attribute idem.HeaderID = Message.ID, the
// headers as attributes, ordering key Message.OrderingKey. Publish returns once
// Pub/Sub has stored every message. A Sink is safe for concurrent use.
type Sink struct {
	client *pubsub.Client
	cfg    SinkConfig
}

// NewSink returns a Sink publishing through client. The topics must exist (see
// EnsureTopic); the client stays the caller's to close.
func NewSink(client *pubsub.Client, cfg SinkConfig) (*Sink, error) {
	cfg, err := brokerkit.Setup(client == nil, "client", "pass pubsub.NewClient(ctx, project)", cfg, SinkConfig.withDefaults)
	if err != nil {
		return nil, err
	}
	return &Sink{client: client, cfg: cfg}, nil
}

// Features reports what Pub/Sub guarantees to idem through this adapter; see the
// package documentation. Ordering and delivery counts depend on the subscription,
// so the sink promises neither.
func (s *Sink) Features() idem.Features { return idem.Features{DelayedNak: true} }

// MessagingSystem is the messaging.system of the spans of the outbox relay and the
// inbox that use it: "gcp_pubsub", as OpenTelemetry's conventions name it.
func (s *Sink) MessagingSystem() string { return messagingSystem }

const messagingSystem = "gcp_pubsub"

// Publish validates every message first (nothing is sent if one is bad), then
// sends them in order, one Publish request per run of messages to the same topic
// (at most 1,000 messages and 9 MiB a request), each after the previous one
// succeeded: messages with the same ordering key are stored in call order. On a
// failure, the requests before the failed one are stored and later ones are not
// sent; the failed one may or may not be stored (the caller's retry republishes
// it, and the inbox drops the copy by its ID). When requests before it were
// stored, the error is an *idem.PublishError saying which messages were, so the
// outbox relay sends only the others again.
func (s *Sink) Publish(ctx context.Context, msgs ...idem.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	out := make([]*pubsubpb.PubsubMessage, len(msgs))
	for i, m := range msgs {
		pm, err := toPubSub(m)
		if err != nil {
			if len(msgs) > 1 {
				return fmt.Errorf("message %d of the batch: %w", i, err)
			}
			return err
		}
		out[i] = pm
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.Timeout)
		defer cancel()
	}
	for start := 0; start < len(out); {
		end, bytes := start, 0
		for end < len(out) && msgs[end].Topic == msgs[start].Topic && end-start < maxBatchCount &&
			(end == start || bytes+size(out[end]) <= maxBatchBytes) {
			bytes += size(out[end])
			end++
		}
		topic := fullName(s.client.Project(), "topics", msgs[start].Topic)
		if _, err := s.client.TopicAdminClient.Publish(ctx, &pubsubpb.PublishRequest{Topic: topic, Messages: out[start:end]}); err != nil {
			err = s.fail(ctx, start, end, len(out), msgs[start], err)
			if start > 0 { // the requests before this one were accepted
				acc := make([]bool, len(msgs))
				for i := range start {
					acc[i] = true
				}
				err = &idem.PublishError{Accepted: acc, Err: err}
			}
			return err
		}
		start = end
	}
	return nil
}

// fail describes the failure of the request holding messages [i, j) of n. The
// caller's cancellation is returned as such; anything else is a *idem.BackendError.
func (s *Sink) fail(ctx context.Context, i, j, n int, m idem.Message, err error) error {
	where := fmt.Sprintf("messages %d..%d of %d (first ID %q, topic %q)", i, j-1, n, m.ID, m.Topic)
	if ctxErr := ctx.Err(); ctxErr != nil && (errors.Is(err, ctxErr) || status.Code(err) == codes.Canceled) {
		return fmt.Errorf("idempubsub: publish stopped at %s: %w", where, ctxErr)
	}
	if status.Code(err) == codes.NotFound {
		err = fmt.Errorf("%w (does the topic exist? create it with idempubsub.EnsureTopic)", err)
	}
	return &idem.BackendError{Backend: backend, Op: "publish", Err: fmt.Errorf("%s: %w", where, err)}
}
