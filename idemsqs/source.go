package idemsqs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/brokerkit"
)

// closeTimeout bounds the calls Close makes to release unsettled messages.
const closeTimeout = 5 * time.Second

// Source consumes one SQS queue: it long-polls ReceiveMessage, keeps extending the
// visibility timeout of every delivery until it is settled, deletes a message when
// its delivery is acknowledged (batching the deletes of concurrent acks into
// DeleteMessageBatch calls), and makes a Nak'ed message visible again after the
// delay. It is safe for concurrent use.
type Source struct {
	c     Client
	cfg   SourceConfig
	url   string
	name  string
	fifo  bool
	ctx   context.Context // ended by Close: aborts long polls and the extender
	stop  context.CancelFunc
	ended chan struct{} // closed when the extender has returned

	mu     sync.Mutex
	closed bool
	// inflight keeps the unsettled deliveries invisible: every third of the
	// visibility timeout it sets their timeout to a full one again, until
	// MaxExtension.
	inflight brokerkit.Keeper[*settler]

	deletes deleter
}

var _ brokerkit.Source = (*Source)(nil)

// NewSource returns a source consuming cfg.Queue with c (an *sqs.Client); a queue
// given by name is resolved with GetQueueUrl now, so a missing queue fails here.
// Close it to stop its background extension of visibility timeouts.
func NewSource(ctx context.Context, c Client, cfg SourceConfig) (*Source, error) {
	cfg, err := brokerkit.Setup(c == nil, "c", "pass an *sqs.Client (sqs.NewFromConfig)", cfg, SourceConfig.withDefaults)
	if err != nil {
		return nil, err
	}
	url, err := newQueueURLs(c).get(ctx, cfg.Queue)
	if err != nil {
		return nil, &idem.BackendError{Backend: Backend, Op: "open", Err: err}
	}
	s := &Source{c: c, cfg: cfg, url: url, name: queueName(url), ended: make(chan struct{})}
	s.fifo = strings.HasSuffix(s.name, ".fifo")
	s.ctx, s.stop = context.WithCancel(context.Background())
	s.deletes.src = s
	s.inflight = brokerkit.Keeper[*settler]{Every: cfg.VisibilityTimeout / 3, Margin: cfg.VisibilityTimeout,
		Lease: cfg.VisibilityTimeout, MaxExtension: cfg.MaxExtension, Extend: s.extend, LetGo: s.letGo}
	go func() {
		defer close(s.ended)
		s.inflight.Run(s.ctx)
	}()
	return s, nil
}

// Features reports the source's guarantees (doc.go explains each): dedup within
// SQS's 5-minute window, order per message group, Nak delays as visibility
// timeouts, and ApproximateReceiveCount as Delivery.Attempt. On a standard queue
// only the last two hold.
func (s *Source) Features() idem.Features {
	if !s.fifo {
		return idem.Features{DelayedNak: true, Attempts: true}
	}
	return adapterFeatures()
}

// MessagingSystem is the messaging.system of the spans of the inbox that uses it:
// "aws_sqs".
func (s *Source) MessagingSystem() string { return "aws_sqs" }

// Receive long-polls until at least one message arrives or ctx ends, and returns at
// most max deliveries (SQS returns at most 10 per call; on a FIFO queue, none of a
// message group while another delivery of it is unsettled). After Close it returns
// idem.ErrClosed.
func (s *Source) Receive(ctx context.Context, max int) ([]idem.Delivery, error) {
	if err := brokerkit.CheckReceive(ctx, max); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	in := &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(s.url),
		MaxNumberOfMessages:         int32(min(max, maxBatch)),
		VisibilityTimeout:           int32(s.cfg.VisibilityTimeout / time.Second),
		MessageAttributeNames:       []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	}
	for {
		if s.isClosed() {
			return nil, idem.ErrClosed
		}
		in.WaitTimeSeconds = s.pollFor(ctx)
		if s.fifo {
			in.ReceiveRequestAttemptId = aws.String(attemptID()) // the SDK's retries of this call reuse it
		}
		received := time.Now()
		out, err := s.c.ReceiveMessage(rctx, in)
		switch {
		case s.isClosed() && (err != nil || len(out.Messages) == 0):
			return nil, idem.ErrClosed
		case err != nil && ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			return nil, &idem.BackendError{Backend: Backend, Op: "receive", Err: fmt.Errorf("receive from %s: %w", s.name, err)}
		case len(out.Messages) > 0:
			return s.deliveries(out.Messages, received)
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case in.WaitTimeSeconds == 0: // a short poll found nothing: pause before the next
			t := time.NewTimer(100 * time.Millisecond)
			select {
			case <-rctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
}

// pollFor is the long poll of the next ReceiveMessage: SourceConfig.WaitTime, cut
// to end a second before ctx's deadline, so that the poll returns (with what it
// took) before the caller stops waiting; 0, a short poll, when less is left. A poll
// cut off by its caller's deadline would leave what it took invisible, to nobody,
// for a whole visibility timeout.
func (s *Source) pollFor(ctx context.Context) int32 {
	wait := s.cfg.WaitTime
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, max(time.Until(d)-time.Second, 0))
	}
	return int32(wait / time.Second)
}

// deliveries turns received messages into deliveries and starts extending them.
func (s *Source) deliveries(msgs []types.Message, received time.Time) ([]idem.Delivery, error) {
	out := make([]idem.Delivery, len(msgs))
	sts := make([]*settler, len(msgs))
	for i, msg := range msgs {
		st := &settler{src: s, handle: aws.ToString(msg.ReceiptHandle), received: received}
		if seq := msg.Attributes[string(types.MessageSystemAttributeNameSequenceNumber)]; seq != "" {
			st.position = fmt.Sprintf("queue %s seq %s", s.name, seq)
		} else {
			st.position = fmt.Sprintf("queue %s message %s", s.name, aws.ToString(msg.MessageId))
		}
		attempt, _ := strconv.Atoi(msg.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
		out[i] = idem.Delivery{Message: decode(s.name, msg), Attempt: max(attempt, 0), Position: st.position, Settler: st}
		sts[i] = st
	}
	s.mu.Lock()
	closed := s.closed
	if !closed {
		for _, st := range sts {
			s.inflight.Add(st, received, received.Add(s.cfg.VisibilityTimeout))
		}
	}
	s.mu.Unlock()
	if closed { // Close came during the poll: hand the messages back
		s.release(sts)
		return nil, idem.ErrClosed
	}
	return out, nil
}

func attemptID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (s *Source) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// untrack stops extending st.
func (s *Source) untrack(st *settler) { s.inflight.Remove(st) }

// extend sets the visibility timeout of sts to a full one again; the keeper lets
// go of those that failed.
func (s *Source) extend(ctx context.Context, sts []*settler) map[*settler]error {
	return s.setVisibility(ctx, sts, s.cfg.VisibilityTimeout)
}

// letGo warns of a delivery the keeper no longer extends.
func (s *Source) letGo(st *settler, err error) {
	if err == nil {
		s.warn("idemsqs: a delivery is unsettled after SourceConfig.MaxExtension; it is no longer extended and comes back when its visibility timeout ends",
			"position", st.position, "max_extension", s.cfg.MaxExtension)
		return
	}
	s.warn("idemsqs: extending a visibility timeout failed; the message may be delivered again",
		"position", st.position, "error", err)
}

// setVisibility sets the visibility timeout of sts in batches of 10 and returns the
// ones that failed, with why.
func (s *Source) setVisibility(ctx context.Context, sts []*settler, timeout time.Duration) map[*settler]error {
	failed := map[*settler]error{}
	for len(sts) > 0 {
		batch := sts[:min(len(sts), maxBatch)]
		sts = sts[len(batch):]
		entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(batch))
		for i, st := range batch {
			entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(st.handle),
				VisibilityTimeout: int32(timeout / time.Second)}
		}
		res, err := s.c.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(s.url), Entries: entries})
		if err != nil {
			for _, st := range batch {
				failed[st] = err
			}
			continue
		}
		for _, f := range res.Failed {
			if i := atoi(f.Id); i >= 0 && i < len(batch) {
				failed[batch[i]] = fmt.Errorf("%s: %s", aws.ToString(f.Code), aws.ToString(f.Message))
			}
		}
	}
	return failed
}

// release makes sts visible again at once, for another consumer.
func (s *Source) release(sts []*settler) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	for st, err := range s.setVisibility(ctx, sts, 0) {
		s.warn("idemsqs: releasing an unsettled delivery at Close failed; it comes back when its visibility timeout ends",
			"position", st.position, "error", err)
	}
}

func (s *Source) warn(msg string, args ...any) {
	if s.cfg.Logger != nil {
		s.cfg.Logger.Warn(msg, args...)
	}
}

// Close stops receiving: blocked and later Receive calls return idem.ErrClosed, the
// extension of visibility timeouts stops, and every unsettled delivery is made
// visible again at once (best effort, within 5 s; what fails comes back when its
// visibility timeout ends). Deliveries received before Close can still be settled.
func (s *Source) Close() error {
	var unsettled []*settler
	if !brokerkit.CloseOnce(&s.mu, &s.closed, func() {
		for _, st := range s.inflight.Drain() {
			if !st.once.Taken() {
				unsettled = append(unsettled, st)
			}
		}
	}) {
		return nil
	}
	s.stop()
	<-s.ended
	s.release(unsettled)
	return nil
}

// PauseRenewals stops the visibility-timeout extensions of the Source's unsettled
// deliveries until resume is called, as a paused process stops them: past
// VisibilityTimeout, SQS delivers them to another consumer. It is for fault
// injection (a consumer paused past its timeout, in tests and chaos runs). resume
// may be called more than once.
func (s *Source) PauseRenewals() (resume func()) { return s.inflight.Pause() }
