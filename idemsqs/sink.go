package idemsqs

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/brokerkit"
)

// Sink publishes messages to SQS FIFO queues with SendMessageBatch: each message's
// ID is its MessageDeduplicationId, its OrderingKey its MessageGroupId. Publish
// returns once SQS accepted every message (stored it redundantly, or recognised it
// as a duplicate within its 5-minute window). It is safe for concurrent use.
type Sink struct {
	c    Client
	cfg  SinkConfig
	urls *queueURLs
}

var _ brokerkit.Sink = (*Sink)(nil)

// NewSink returns a sink publishing with c (an *sqs.Client). Message.Topic names
// the queue: its name, resolved once with GetQueueUrl, or its URL.
func NewSink(c Client, cfg SinkConfig) (*Sink, error) {
	cfg, err := brokerkit.Setup(c == nil, "c", "pass an *sqs.Client (sqs.NewFromConfig)", cfg, SinkConfig.withDefaults)
	if err != nil {
		return nil, err
	}
	return &Sink{c: c, cfg: cfg, urls: newQueueURLs(c)}, nil
}

// Features: SQS FIFO drops a message republished with the same
// MessageDeduplicationId within 5 minutes, and delivers one message group in
// order. Its Nak delay is a visibility timeout, and it counts receives.
func (s *Sink) Features() idem.Features { return adapterFeatures() }

// MessagingSystem is the messaging.system of the spans of the outbox relay and the
// inbox that use it: "aws_sqs".
func (s *Sink) MessagingSystem() string { return "aws_sqs" }

// Close does nothing: the client belongs to the caller. It makes Sink an io.Closer
// like the other sinks.
func (s *Sink) Close() error { return nil }

// Publish validates every message, then sends them in order, in batches of at most
// 10 messages and SinkConfig.MaxMessageSize bytes per queue. A message SQS refuses
// fails Publish with a *idem.BackendError naming its id; messages before it were
// published, and some after it in its batch may have been. When SQS stored some of
// them, the error is an *idem.PublishError that says which, so the outbox relay
// sends only the others again. Publishing again is safe all the same: SQS drops the
// copies sent within 5 minutes and the consumer's inbox the others.
func (s *Sink) Publish(ctx context.Context, msgs ...idem.Message) error {
	out := make([]outgoing, len(msgs))
	for i, m := range msgs {
		o, err := encode(m, s.cfg)
		if err != nil {
			return fmt.Errorf("message %d of the batch: %w", i, err)
		}
		out[i] = o
	}
	for start := 0; start < len(out); {
		n := s.batchLen(out[start:])
		if ok, err := s.send(ctx, out[start:start+n]); err != nil {
			err = &idem.BackendError{Backend: Backend, Op: "publish", Err: err}
			accepted := make([]bool, len(out))
			some := start > 0
			for i := range start {
				accepted[i] = true
			}
			for i, yes := range ok {
				accepted[start+i] = yes
				some = some || yes
			}
			if !some {
				return err
			}
			// SQS stored those: the relay sends only the others again.
			return &idem.PublishError{Accepted: accepted, Err: err}
		}
		start += n
	}
	return nil
}

// batchLen is how many of out, from the first, go in one SendMessageBatch: same
// queue, at most 10, within the size limit.
func (s *Sink) batchLen(out []outgoing) int {
	n, size := 1, out[0].size
	for n < len(out) && n < maxBatch && out[n].m.Topic == out[0].m.Topic && size+out[n].size <= s.cfg.MaxMessageSize {
		size += out[n].size
		n++
	}
	return n
}

// send sends one batch to its queue. On a failure, ok says which of its messages
// SQS stored (nil when it cannot tell).
func (s *Sink) send(ctx context.Context, batch []outgoing) (ok []bool, err error) {
	url, err := s.urls.get(ctx, batch[0].m.Topic)
	if err != nil {
		return nil, err
	}
	entries := make([]types.SendMessageBatchRequestEntry, len(batch))
	for i := range batch {
		entries[i] = batch[i].entry
		entries[i].Id = aws.String(strconv.Itoa(i))
	}
	res, err := s.c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
	if err != nil {
		return nil, fmt.Errorf("send %d messages to %s (first %q): %w", len(batch), queueName(url), batch[0].m.ID, err)
	}
	if len(res.Failed) == 0 {
		return nil, nil
	}
	ok = make([]bool, len(batch))
	for _, r := range res.Successful {
		if i := atoi(r.Id); i >= 0 && i < len(batch) {
			ok[i] = true
		}
	}
	first := res.Failed[0]
	for _, f := range res.Failed[1:] {
		if atoi(f.Id) < atoi(first.Id) {
			first = f
		}
	}
	i := atoi(first.Id)
	id := "?"
	if i >= 0 && i < len(batch) {
		id = batch[i].m.ID
	}
	return ok, fmt.Errorf("SQS refused message %q (and %d more of the batch) on %s: %s: %s",
		id, len(res.Failed)-1, queueName(url), aws.ToString(first.Code), aws.ToString(first.Message))
}

func atoi(s *string) int {
	i, err := strconv.Atoi(aws.ToString(s))
	if err != nil {
		return -1
	}
	return i
}

// queueURLs resolves queue names to URLs once per name.
type queueURLs struct {
	c  Client
	mu sync.Mutex
	m  map[string]string
}

func newQueueURLs(c Client) *queueURLs { return &queueURLs{c: c, m: map[string]string{}} }

func (u *queueURLs) get(ctx context.Context, queue string) (string, error) {
	if isURL(queue) {
		return queue, nil
	}
	u.mu.Lock()
	url, ok := u.m[queue]
	u.mu.Unlock()
	if ok {
		return url, nil
	}
	res, err := u.c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(queue)})
	if err != nil {
		return "", fmt.Errorf("find the URL of queue %q: %w", queue, err)
	}
	url = aws.ToString(res.QueueUrl)
	u.mu.Lock()
	u.m[queue] = url
	u.mu.Unlock()
	return url, nil
}

// adapterFeatures is what the adapter promises on both ends; doc.go explains each.
func adapterFeatures() idem.Features {
	return idem.Features{Dedup: true, OrderedPerKey: true, DelayedNak: true, Attempts: true}
}
