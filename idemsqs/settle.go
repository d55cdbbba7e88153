package idemsqs

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/brokerkit"
)

// settleTimeout bounds one DeleteMessageBatch call made for several acks, which no
// single caller's ctx owns.
const settleTimeout = 30 * time.Second

// settler settles one delivery by its receipt handle.
type settler struct {
	src      *Source
	handle   string
	position string
	received time.Time
	once     brokerkit.Once
}

var _ idem.Settler = (*settler)(nil)

// Ack deletes the message. It waits for SQS's answer; the deletes of concurrent
// acks on one source go out together in DeleteMessageBatch calls. SQS answers a
// delete with a receipt handle that is no longer the message's latest (its
// visibility timeout ended and another consumer received it) with success but keeps
// the message, which then comes again: the inbox's dedup absorbs it.
func (st *settler) Ack(ctx context.Context) error {
	if err := st.begin(ctx, "ack"); err != nil {
		return err
	}
	st.src.untrack(st)
	if err := st.src.deletes.do(ctx, st); err != nil {
		st.once.Undo()
		return &idem.BackendError{Backend: Backend, Op: "ack", Err: fmt.Errorf("delete %s: %w; it comes again after its visibility timeout", st.position, err)}
	}
	return nil
}

// Nak makes the message visible again after delay (rounded up to whole seconds,
// at most what is left of SQS's 12 hours): SQS holds it, so the delay survives this
// process. A message whose visibility timeout already ended is visible already,
// and Nak returns nil.
func (st *settler) Nak(ctx context.Context, delay time.Duration) error {
	if err := st.begin(ctx, "nak"); err != nil {
		return err
	}
	st.src.untrack(st)
	delay = min(max(delay, 0), maxVisibility-time.Since(st.received))
	seconds := int32((max(delay, 0) + time.Second - 1) / time.Second)
	res, err := st.src.c.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(st.src.url),
		Entries: []types.ChangeMessageVisibilityBatchRequestEntry{{Id: aws.String("0"), ReceiptHandle: aws.String(st.handle), VisibilityTimeout: seconds}}})
	if err == nil && len(res.Failed) > 0 {
		f := res.Failed[0]
		if aws.ToString(f.Code) == "MessageNotInflight" || aws.ToString(f.Code) == "AWS.SimpleQueueService.MessageNotInflight" {
			return nil
		}
		err = fmt.Errorf("%s: %s", aws.ToString(f.Code), aws.ToString(f.Message))
	}
	if err != nil {
		st.once.Undo()
		return &idem.BackendError{Backend: Backend, Op: "nak", Err: fmt.Errorf("change the visibility of %s: %w; it comes again after its visibility timeout", st.position, err)}
	}
	return nil
}

// begin checks ctx and claims the delivery's one settlement (idem.ErrSettled if it
// is taken).
func (st *settler) begin(ctx context.Context, op string) error {
	return st.once.Claim(ctx, "idemsqs", op, st.position)
}

// deleter sends the deletes of concurrent acks together: while one
// DeleteMessageBatch is on its way, the acks that arrive queue up and go out in the
// next, up to 10 at a time. No ack waits for a timer.
type deleter struct {
	src     *Source
	mu      sync.Mutex
	pending []*deleteReq
	running bool
}

type deleteReq struct {
	st   *settler
	done chan error
}

func (d *deleter) do(ctx context.Context, st *settler) error {
	r := &deleteReq{st: st, done: make(chan error, 1)}
	d.mu.Lock()
	d.pending = append(d.pending, r)
	start := !d.running
	d.running = true
	d.mu.Unlock()
	if start {
		go d.run()
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run sends batches until nothing is pending.
func (d *deleter) run() {
	for {
		d.mu.Lock()
		n := min(len(d.pending), maxBatch)
		if n == 0 {
			d.running = false
			d.mu.Unlock()
			return
		}
		batch := d.pending[:n:n]
		d.pending = d.pending[n:]
		d.mu.Unlock()
		d.send(batch)
	}
}

func (d *deleter) send(batch []*deleteReq) {
	entries := make([]types.DeleteMessageBatchRequestEntry, len(batch))
	for i, r := range batch {
		entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(r.st.handle)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	res, err := d.src.c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(d.src.url), Entries: entries})
	errs := make([]error, len(batch))
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
	} else {
		for _, f := range res.Failed {
			if i := atoi(f.Id); i >= 0 && i < len(batch) {
				errs[i] = &smithy.GenericAPIError{Code: aws.ToString(f.Code), Message: aws.ToString(f.Message)}
			}
		}
	}
	for i, r := range batch {
		r.done <- errs[i]
	}
}
