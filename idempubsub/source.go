package idempubsub

import (
	"context"
	"fmt"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/brokerkit"
)

var _ brokerkit.Source = (*Source)(nil)

// Source receives from a Pub/Sub subscription with Pull requests. Every source on
// one subscription competes for its messages. It keeps renewing the ack deadline of
// each message it pulled until the message is settled (or MaxExtension passed), so
// a slow handler does not see its message redelivered to another consumer. A Source
// is safe for concurrent use.
type Source struct {
	client *pubsub.Client
	sub    string // full name
	topic  string // Delivery.Topic
	cfg    SourceConfig
	info   subscriptionInfo

	ctx    context.Context // ends at Close: pulls and renewals run under it
	cancel context.CancelFunc
	wg     sync.WaitGroup // the renewal loop and the pull in flight

	// leases holds every pulled, unsettled message by ack ID (buf included) and
	// renews its ack deadline shortly before it expires, to Lease from now, until
	// MaxExtension after its Pull. Added to under pump.Mu.
	leases brokerkit.Keeper[string]

	// pump buffers what the Pull brings (Pulling: a Pull is in flight).
	pump brokerkit.Pump[*pubsubpb.ReceivedMessage]

	ackq      chan *ackRequest // to ackLoop, closed at Close
	ackMu     sync.RWMutex     // guards ackClosed and sends on ackq
	ackClosed bool
	ackWG     sync.WaitGroup
}

// maxPullMessages caps one Pull request.
const maxPullMessages = 1000

// subscriptionInfo is what the source knows of its subscription. GetSubscription
// needs pubsub.subscriptions.get, which roles/pubsub.subscriber lacks: without it,
// the source assumes the least (10 s deadline, no ordering, no counts).
type subscriptionInfo struct {
	known       bool
	topic       string
	ackDeadline time.Duration
	ordering    bool
	exactlyOnce bool
	counts      bool // a dead-letter policy: deliveries carry delivery_attempt
}

// NewSource returns a Source on the subscription cfg names, through client (which
// stays the caller's to close). It reads the subscription's settings when the
// credentials allow (see Features), and fails if the subscription does not exist.
func NewSource(ctx context.Context, client *pubsub.Client, cfg SourceConfig) (*Source, error) {
	cfg, err := brokerkit.Setup(client == nil, "client", "pass pubsub.NewClient(ctx, project)", cfg, SourceConfig.withDefaults)
	if err != nil {
		return nil, err
	}
	s := &Source{client: client, sub: fullName(client.Project(), "subscriptions", cfg.Subscription), cfg: cfg}
	s.info = subscriptionInfo{ackDeadline: DefaultAckDeadline}
	ps, err := client.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: s.sub})
	switch {
	case status.Code(err) == codes.PermissionDenied:
		s.topic = cfg.Subscription
		if cfg.Logger != nil {
			cfg.Logger.Info("idempubsub: no permission to read the subscription's settings; assuming a 10s ack deadline, no ordering and no delivery counts",
				"subscription", s.sub)
		}
	case status.Code(err) == codes.NotFound:
		return nil, &idem.BackendError{Backend: backend, Op: "get subscription",
			Err: fmt.Errorf("subscription %q: %w (create it with idempubsub.EnsureSubscription)", s.sub, err)}
	case err != nil:
		return nil, &idem.BackendError{Backend: backend, Op: "get subscription", Err: fmt.Errorf("subscription %q: %w", s.sub, err)}
	default:
		s.info = subscriptionInfo{known: true, topic: ps.GetTopic(), ackDeadline: time.Duration(max(ps.GetAckDeadlineSeconds(), 1)) * time.Second,
			ordering: ps.GetEnableMessageOrdering(), exactlyOnce: ps.GetEnableExactlyOnceDelivery(), counts: ps.GetDeadLetterPolicy() != nil}
		s.topic = shortName(client.Project(), "topics", ps.GetTopic())
	}
	period := min(s.info.ackDeadline, cfg.Lease) / 4
	s.leases = brokerkit.Keeper[string]{Every: period, Margin: 2 * period, Lease: cfg.Lease,
		MaxExtension: cfg.MaxExtension + cfg.Lease, // renewals go on until MaxExtension after the Pull
		Extend:       s.renew, LetGo: s.letGo}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Go(func() { s.leases.Run(s.ctx) })
	s.ackq = make(chan *ackRequest, maxAckIDs)
	s.ackWG.Add(1)
	go s.ackLoop()
	return s, nil
}

// Features reports what the subscription guarantees to idem: OrderedPerKey on a
// subscription with message ordering, Attempts on one with a dead-letter policy
// (the only kind where Pub/Sub counts deliveries), DelayedNak always. Pub/Sub does
// not deduplicate what is published twice, so Dedup is false even with
// exactly-once delivery. A source that could not read its subscription promises
// only DelayedNak.
func (s *Source) Features() idem.Features {
	return idem.Features{OrderedPerKey: s.info.ordering, Attempts: s.info.counts, DelayedNak: true}
}

// ExactlyOnce reports whether the subscription has exactly-once delivery (false
// when the source could not read its settings).
func (s *Source) ExactlyOnce() bool { return s.info.exactlyOnce }

// MessagingSystem is the messaging.system of the spans of the inbox that uses it:
// "gcp_pubsub".
func (s *Source) MessagingSystem() string { return messagingSystem }

// Receive returns up to max deliveries, blocking until at least one is available
// or ctx ends (then it returns ctx.Err()). Each delivery must be settled with Ack
// after its effect committed, or Nak; the source renews its ack deadline until
// then. While MaxOutstanding deliveries are unsettled, Receive waits.
func (s *Source) Receive(ctx context.Context, max int) ([]idem.Delivery, error) {
	if err := brokerkit.CheckMax(max); err != nil {
		return nil, err
	}
	msgs, err := s.pump.Receive(ctx, func() ([]*pubsubpb.ReceivedMessage, error) { return s.next(max) })
	if err != nil {
		return nil, err
	}
	return s.deliveries(msgs), nil
}

// next hands out up to max buffered messages while fewer than MaxOutstanding are
// unsettled, or reports the last Pull's failure, or starts a Pull if none is in
// flight, the buffer is empty and there is room. s.pump.Mu is held.
func (s *Source) next(max int) ([]*pubsubpb.ReceivedMessage, error) {
	leased := s.leases.Len()
	handedOut := leased - len(s.pump.Buf)
	if n := min(max, len(s.pump.Buf), s.cfg.MaxOutstanding-handedOut); n > 0 {
		return s.pump.Take(n), nil
	}
	if err := s.pump.Failed(); err != nil {
		return nil, &idem.BackendError{Backend: backend, Op: "receive", Err: err}
	}
	if room := s.cfg.MaxOutstanding - leased; !s.pump.Pulling && len(s.pump.Buf) == 0 && room > 0 {
		s.pump.Pulling = true
		s.wg.Add(1)
		go s.pull(min(max, room, maxPullMessages))
	}
	return nil, nil
}

// pull sends one Pull request for up to n messages and buffers what it brings.
// It runs under the source's context, not a caller's: a Receive that gives up does
// not cancel a Pull whose messages Pub/Sub has already handed out.
func (s *Source) pull(n int) {
	defer s.wg.Done()
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.PullWait)
	resp, err := s.client.SubscriptionAdminClient.Pull(ctx, &pubsubpb.PullRequest{Subscription: s.sub, MaxMessages: int32(n)})
	timedOut := ctx.Err() != nil && s.ctx.Err() == nil
	cancel()
	now := time.Now()
	s.pump.Mu.Lock()
	s.pump.Pulling = false
	msgs := resp.GetReceivedMessages()
	if s.pump.Closed {
		s.pump.Mu.Unlock()
		s.nack(msgs)
		return
	}
	for _, m := range msgs {
		s.leases.Add(m.GetAckId(), now, now.Add(s.info.ackDeadline))
	}
	s.pump.Buf = append(s.pump.Buf, msgs...)
	if err != nil && !timedOut && status.Code(err) != codes.DeadlineExceeded {
		s.pump.Err = fmt.Errorf("pull from %q: %w", s.sub, err)
	}
	s.pump.Broadcast()
	s.pump.Mu.Unlock()
}

// deliveries wraps pulled messages.
func (s *Source) deliveries(msgs []*pubsubpb.ReceivedMessage) []idem.Delivery {
	out := make([]idem.Delivery, len(msgs))
	for i, rm := range msgs {
		st := &settler{src: s, ackID: rm.GetAckId(), msgID: rm.GetMessage().GetMessageId()}
		st.position = "message " + st.msgID
		out[i] = idem.Delivery{
			Message:  fromPubSub(rm.GetMessage(), s.topic),
			Attempt:  int(max(rm.GetDeliveryAttempt(), 0)),
			Position: st.position,
			Settler:  st,
		}
	}
	return out
}

// release stops renewing ackID's deadline; it reports false if it was not leased
// (settled before, or given back at Close).
func (s *Source) release(ackID string) bool {
	if !s.leases.Remove(ackID) {
		return false
	}
	s.pump.Mu.Lock()
	defer s.pump.Mu.Unlock()
	s.pump.Broadcast()
	return true
}

// renew sets the ack deadline of ackIDs to Lease from now. A failure is logged and
// the messages stay leased: the next look tries again.
func (s *Source) renew(ctx context.Context, ackIDs []string) map[string]error {
	for len(ackIDs) > 0 {
		n := min(len(ackIDs), maxAckIDs)
		err := s.client.SubscriptionAdminClient.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{
			Subscription: s.sub, AckIds: ackIDs[:n], AckDeadlineSeconds: int32(s.cfg.Lease / time.Second)})
		if err != nil && ctx.Err() == nil {
			s.logWarn("renewing ack deadlines failed; those messages may be delivered again while their handlers run",
				"messages", n, "err", err)
		}
		ackIDs = ackIDs[n:]
	}
	return nil
}

// letGo warns of a message whose deadline is no longer renewed.
func (s *Source) letGo(ackID string, _ error) {
	s.logWarn("a delivery was not settled within MaxExtension; it is delivered again once its ack deadline passes",
		"ack_id", ackID, "max_extension", s.cfg.MaxExtension)
}

// nack gives msgs back to the subscription at once (ack deadline 0).
func (s *Source) nack(msgs []*pubsubpb.ReceivedMessage) {
	if len(msgs) == 0 {
		return
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.GetAckId()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for len(ids) > 0 {
		n := min(len(ids), maxAckIDs)
		err := s.client.SubscriptionAdminClient.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{
			Subscription: s.sub, AckIds: ids[:n]})
		if err != nil {
			s.logWarn("handing back pulled messages at close failed; they are delivered again once their ack deadline passes",
				"messages", n, "err", err)
		}
		ids = ids[n:]
	}
}

func (s *Source) logWarn(msg string, args ...any) {
	if s.cfg.Logger != nil {
		s.cfg.Logger.Warn("idempubsub: "+msg, append([]any{"subscription", s.sub}, args...)...)
	}
}

// Close stops receiving: Receive returns idem.ErrClosed from now on. Messages
// pulled but not yet handed out are given back at once (Nack); deliveries already
// returned can still be settled, but their deadlines are no longer renewed, so an
// unsettled one comes back within Lease. A Pull in flight is cancelled.
func (s *Source) Close() error {
	buf, first := s.pump.Close(func(buf []*pubsubpb.ReceivedMessage) {
		for _, m := range buf {
			s.leases.Remove(m.GetAckId())
		}
	})
	if !first {
		return nil
	}
	s.cancel()
	s.wg.Wait()
	s.nack(buf)
	// Acks queued before Close are sent; later ones go on their own.
	s.ackMu.Lock()
	s.ackClosed = true
	close(s.ackq)
	s.ackMu.Unlock()
	s.ackWG.Wait()
	return nil
}

// PauseRenewals stops the ack-deadline extensions of the Source's unsettled
// deliveries until resume is called, as a paused process stops them: past
// SourceConfig.Lease, Pub/Sub delivers them again. It is for fault injection (a
// consumer paused past its lease, in tests and chaos runs). resume may be called
// more than once.
func (s *Source) PauseRenewals() (resume func()) { return s.leases.Pause() }
