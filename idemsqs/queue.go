package idemsqs

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemhq/idem"
)

// QueueConfig configures a queue made by EnsureQueue. The zero value is a FIFO
// queue with SQS's defaults and deduplication by MessageDeduplicationId only.
type QueueConfig struct {
	// VisibilityTimeout is the queue's default visibility timeout; a Source sets
	// its own on every receive. Zero leaves SQS's default (30 s).
	VisibilityTimeout time.Duration
	// MaxMessageSize is the queue's MaximumMessageSize in bytes. Zero leaves SQS's
	// default (256 KiB); at most 1 MiB. Give the sink the same value.
	MaxMessageSize int
	// ContentBasedDeduplication makes SQS deduplicate messages sent without a
	// MessageDeduplicationId by the SHA-256 of their body. idemsqs always sends one;
	// this is for other producers on the same queue.
	ContentBasedDeduplication bool
}

// EnsureQueue creates the FIFO queue name (which must end in ".fifo"), or finds it
// if it exists with the same attributes, and returns its URL.
func EnsureQueue(ctx context.Context, c interface {
	CreateQueue(context.Context, *sqs.CreateQueueInput, ...func(*sqs.Options)) (*sqs.CreateQueueOutput, error)
}, name string, cfg QueueConfig) (string, error) {
	if !strings.HasSuffix(name, ".fifo") {
		return "", &idem.InputError{Field: "name", Reason: fmt.Sprintf("does not end in .fifo (got %q)", name),
			Fix: "name the queue like \"orders.fifo\": idemsqs publishes to FIFO queues"}
	}
	attrs := map[string]string{"FifoQueue": "true"}
	if cfg.VisibilityTimeout != 0 {
		attrs["VisibilityTimeout"] = strconv.Itoa(int(cfg.VisibilityTimeout / time.Second))
	}
	if cfg.MaxMessageSize != 0 {
		attrs["MaximumMessageSize"] = strconv.Itoa(cfg.MaxMessageSize)
	}
	if cfg.ContentBasedDeduplication {
		attrs["ContentBasedDeduplication"] = "true"
	}
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		return "", &idem.BackendError{Backend: Backend, Op: "create queue", Err: fmt.Errorf("%s: %w", name, err)}
	}
	return aws.ToString(out.QueueUrl), nil
}
