package idemsqs

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemhq/idem/idemsqs/internal/sqsrules"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemhq/idem"
)

// Backend is the name this package puts in every *idem.BackendError it returns.
const Backend = "sqs"

// Defaults and SQS's own limits.
const (
	// DefaultGroup is the MessageGroupId of a message without an OrderingKey when
	// SinkConfig.DefaultGroup is empty: one group, so such messages keep the queue's
	// order, one batch in flight at a time.
	DefaultGroup = "default"
	// DefaultMaxMessageSize is SQS's default MaximumMessageSize (256 KiB): body and
	// message attributes of one message, and of one batch.
	DefaultMaxMessageSize = 256 << 10
	// MaxMessageSize is the largest MaximumMessageSize a queue can have (1 MiB).
	MaxMessageSize = 1 << 20
	// DefaultVisibilityTimeout is how long a received message stays invisible to
	// other consumers between two extensions by the source.
	DefaultVisibilityTimeout = 30 * time.Second
	// DefaultMaxExtension bounds how long the source keeps extending the visibility
	// of one message whose handler has not settled it.
	DefaultMaxExtension = 30 * time.Minute
	// DefaultWaitTime is the long poll of each ReceiveMessage call: SQS's maximum.
	DefaultWaitTime = 20 * time.Second
	// DedupWindow is SQS's deduplication interval for FIFO queues: fixed, not
	// configurable, counted from the first send of a MessageDeduplicationId.
	DedupWindow = 5 * time.Minute

	maxVisibility = 12 * time.Hour // SQS's limit on one message's total invisibility
	maxWait       = 20 * time.Second
	maxBatch      = 10 // entries of one SQS batch call
	maxAttributes = 10 // message attributes of one message
)

// Client is the part of *sqs.Client the sink and the source use; a test can wrap
// one to inject failures.
type Client interface {
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
}

var _ Client = (*sqs.Client)(nil)

// SinkConfig configures a Sink. The zero value publishes to FIFO queues of SQS's
// default message size.
type SinkConfig struct {
	// DefaultGroup is the MessageGroupId of messages without an OrderingKey. Empty
	// means DefaultGroup ("default"): one group per queue, so those messages are
	// delivered in order but one batch at a time across all consumers. Set
	// Message.OrderingKey (an order id, an account) to let consumers work on
	// several groups in parallel.
	DefaultGroup string
	// GroupByID gives each message without an OrderingKey a group of its own (its
	// deduplication id) instead of DefaultGroup: no order among such messages, and
	// none waits for another to be settled, so consumers take them in parallel.
	GroupByID bool
	// MaxMessageSize is the MaximumMessageSize of the queues published to: the
	// sink refuses a larger message (body, after encoding, plus attributes) with an
	// *idem.InputError before sending, and sends batches no larger. Zero means
	// DefaultMaxMessageSize (256 KiB); at most MaxMessageSize (1 MiB).
	MaxMessageSize int
}

func (cfg SinkConfig) withDefaults() (SinkConfig, error) {
	cfg.DefaultGroup = cmp.Or(cfg.DefaultGroup, DefaultGroup)
	cfg.MaxMessageSize = cmp.Or(cfg.MaxMessageSize, DefaultMaxMessageSize)
	if err := sqsrules.GroupOrDedupID(cfg.DefaultGroup); err != nil {
		return cfg, &idem.InputError{Field: "SinkConfig.DefaultGroup", Reason: err.Error(),
			Fix: "use 1 to 128 letters, digits or ASCII punctuation, as SQS requires of a MessageGroupId"}
	}
	if cfg.MaxMessageSize < 1024 || cfg.MaxMessageSize > MaxMessageSize {
		return cfg, &idem.InputError{Field: "SinkConfig.MaxMessageSize", Reason: fmt.Sprintf("is outside 1024..%d (got %d)", MaxMessageSize, cfg.MaxMessageSize),
			Fix: "leave it zero for SQS's default of 256 KiB, or set the queues' MaximumMessageSize"}
	}
	return cfg, nil
}

// SourceConfig configures a Source.
type SourceConfig struct {
	// Queue is the queue to consume: its name ("orders.fifo") or its URL. Required.
	Queue string
	// VisibilityTimeout is the visibility timeout the source asks for on every
	// receive: how long a message stays hidden from other consumers. While a
	// delivery is unsettled the source extends it by this much every third of it,
	// so a crashed consumer's messages come back within about this time. Zero means
	// DefaultVisibilityTimeout (30 s); 1 s to 12 h, in whole seconds.
	VisibilityTimeout time.Duration
	// MaxExtension stops the extensions of a delivery unsettled for this long, so a
	// stuck handler does not hold its message (and, on a FIFO queue, its whole
	// group) for ever: the message then comes back after its visibility timeout.
	// Zero means DefaultMaxExtension (30 min); at most 12 h, SQS's limit.
	MaxExtension time.Duration
	// WaitTime is the long poll of each ReceiveMessage call, in whole seconds. Zero
	// means DefaultWaitTime (20 s, SQS's maximum). Receive keeps polling until a
	// message arrives or its ctx ends; a poll never outlasts ctx's deadline, so no
	// message is taken by a poll nobody waits for any more.
	WaitTime time.Duration
	// Logger, if set, receives what the source cannot return to a caller: failed
	// visibility extensions and releases at Close.
	Logger *slog.Logger
}

func (cfg SourceConfig) withDefaults() (SourceConfig, error) {
	cfg.VisibilityTimeout = cmp.Or(cfg.VisibilityTimeout, DefaultVisibilityTimeout)
	cfg.MaxExtension = cmp.Or(cfg.MaxExtension, DefaultMaxExtension)
	cfg.WaitTime = cmp.Or(cfg.WaitTime, DefaultWaitTime)
	switch {
	case cfg.Queue == "":
		return cfg, &idem.InputError{Field: "SourceConfig.Queue", Reason: "is empty", Fix: "name the queue to consume (\"orders.fifo\") or give its URL"}
	case cfg.VisibilityTimeout < time.Second || cfg.VisibilityTimeout > maxVisibility || cfg.VisibilityTimeout%time.Second != 0:
		return cfg, &idem.InputError{Field: "SourceConfig.VisibilityTimeout", Reason: fmt.Sprintf("is not a whole number of seconds in 1s..12h (got %v)", cfg.VisibilityTimeout),
			Fix: "leave it zero for 30s, or pick whole seconds up to SQS's 12 h"}
	case cfg.MaxExtension < 0 || cfg.MaxExtension > maxVisibility:
		return cfg, &idem.InputError{Field: "SourceConfig.MaxExtension", Reason: fmt.Sprintf("is outside 0..12h (got %v)", cfg.MaxExtension),
			Fix: "leave it zero for 30 min; SQS hides a message for at most 12 h in all"}
	case cfg.WaitTime < time.Second || cfg.WaitTime > maxWait || cfg.WaitTime%time.Second != 0:
		return cfg, &idem.InputError{Field: "SourceConfig.WaitTime", Reason: fmt.Sprintf("is not a whole number of seconds in 1s..20s (got %v)", cfg.WaitTime),
			Fix: "leave it zero for SQS's longest poll, 20s"}
	}
	return cfg, nil
}
