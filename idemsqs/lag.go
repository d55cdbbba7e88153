package idemsqs

import (
	"context"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/idemhq/idem"
)

var _ idem.LagReporter = (*Source)(nil)

// attributesClient is the optional method of a Client that Lag needs; *sqs.Client
// has it. Client does not require it, so wrappers written before Lag still build.
type attributesClient interface {
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// lagAttributes are the queue attributes Lag adds up: messages available to
// receive, received and not yet deleted (in flight, including those a Nak holds
// invisible for its delay), and sent with a delay not yet over.
var lagAttributes = []types.QueueAttributeName{
	types.QueueAttributeNameApproximateNumberOfMessages,
	types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
	types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
}

// Lag asks SQS for the queue's attributes (one GetQueueAttributes call) and
// returns ApproximateNumberOfMessages + ApproximateNumberOfMessagesNotVisible +
// ApproximateNumberOfMessagesDelayed: every message of the queue not yet deleted,
// whichever consumer holds it. SQS's counts are approximate: they lag changes by up
// to about a minute and are not exact even then, so the value converges to the
// truth rather than being it at each call (sqsfake counts exactly). The queue is
// the consumer here: SQS has no consumer groups. The Client must have
// GetQueueAttributes, as *sqs.Client does; otherwise Lag returns an error saying so.
func (s *Source) Lag(ctx context.Context) (idem.Lag, error) {
	c, ok := s.c.(attributesClient)
	if !ok {
		return idem.Lag{}, &idem.InputError{Field: "Client", Reason: fmt.Sprintf("(%T) has no GetQueueAttributes, which Lag needs", s.c),
			Fix: "pass an *sqs.Client, or give the wrapper a GetQueueAttributes method"}
	}
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(s.url), AttributeNames: lagAttributes})
	if err != nil {
		return idem.Lag{}, &idem.BackendError{Backend: Backend, Op: "get queue attributes", Err: fmt.Errorf("queue %s: %w", s.name, err)}
	}
	var lag int64
	for _, name := range lagAttributes {
		v, ok := out.Attributes[string(name)]
		if !ok {
			continue // sqsfake or an emulator without the attribute: it holds none
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return idem.Lag{}, &idem.BackendError{Backend: Backend, Op: "get queue attributes",
				Err: fmt.Errorf("queue %s: attribute %s is %q, not a count: %w", s.name, name, v, err)}
		}
		lag += n
	}
	return idem.Lag{Messages: lag}, nil
}
