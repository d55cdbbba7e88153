package sqsfake

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

type createQueueInput struct {
	QueueName  string
	Attributes map[string]string
}

type queueURLOutput struct {
	QueueUrl string
}

func (s *Server) createQueue(in createQueueInput) (any, *apiError) {
	if err := validQueueName(in.QueueName); err != nil {
		return nil, errInvalid("Value %q for parameter QueueName is invalid: %v.", in.QueueName, err)
	}
	fifo := in.Attributes["FifoQueue"] == "true"
	if fifo != (len(in.QueueName) > 5 && in.QueueName[len(in.QueueName)-5:] == ".fifo") {
		return nil, errInvalid("The name of a FIFO queue must end with the .fifo suffix, and only FIFO queues (FifoQueue=true) may.")
	}
	q := &queue{name: in.QueueName, url: s.QueueURL(in.QueueName), fifo: fifo, visibility: 30 * time.Second, maxSize: DefaultMaxSize,
		handles: map[string]*message{}, dedup: map[string]dedupEntry{}, retries: map[string]attempt{}, changed: make(chan struct{}), created: s.now()}
	for k, v := range in.Attributes {
		n, err := strconv.Atoi(v)
		switch k {
		case "FifoQueue":
		case "ContentBasedDeduplication":
			q.contentDedup = v == "true"
		case "VisibilityTimeout":
			if err != nil || n < 0 || n > MaxVisibility {
				return nil, &apiError{400, "InvalidAttributeValue", "InvalidAttributeValue", fmt.Sprintf("Invalid value for the parameter VisibilityTimeout: %q.", v)}
			}
			q.visibility = time.Duration(n) * time.Second
		case "MaximumMessageSize":
			if err != nil || n < MinMessageSize || n > MaxMessageSize {
				return nil, &apiError{400, "InvalidAttributeValue", "InvalidAttributeValue", fmt.Sprintf("Invalid value for the parameter MaximumMessageSize: %q.", v)}
			}
			q.maxSize = n
		case "ReceiveMessageWaitTimeSeconds":
			if err != nil || n < 0 || n > MaxWaitSeconds {
				return nil, &apiError{400, "InvalidAttributeValue", "InvalidAttributeValue", fmt.Sprintf("Invalid value for the parameter ReceiveMessageWaitTimeSeconds: %q.", v)}
			}
			q.wait = n
		case "MessageRetentionPeriod", "DeduplicationScope", "FifoThroughputLimit", "DelaySeconds":
			// Accepted and ignored (DelaySeconds only as 0).
			if k == "DelaySeconds" && v != "0" {
				return nil, &apiError{400, "UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation", "sqsfake does not implement delay queues"}
			}
		default:
			return nil, &apiError{400, "InvalidAttributeName", "InvalidAttributeName", fmt.Sprintf("Unknown Attribute %s.", k)}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.queues[in.QueueName]; old != nil {
		if old.fifo != q.fifo || old.contentDedup != q.contentDedup || old.visibility != q.visibility || old.maxSize != q.maxSize || old.wait != q.wait {
			return nil, &apiError{400, "QueueNameExists", "QueueAlreadyExists", fmt.Sprintf("A queue already exists with the same name %q and different attributes.", in.QueueName)}
		}
		return queueURLOutput{old.url}, nil
	}
	s.queues[in.QueueName] = q
	return queueURLOutput{q.url}, nil
}

func (s *Server) getQueueURL(in struct{ QueueName string }) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[in.QueueName]
	if q == nil {
		return nil, errNoQueue()
	}
	return queueURLOutput{q.url}, nil
}

type queueInput struct {
	QueueUrl       string
	AttributeNames []string
}

func (s *Server) getQueueAttributes(in queueInput) (any, *apiError) {
	return s.onQueue(in.QueueUrl, func(q *queue) (any, *apiError) { return s.attributes(q, in.AttributeNames), nil })
}

// attributes are the values of names (or all for "All") on q; s.mu is held.
func (s *Server) attributes(q *queue, names []string) any {
	now := s.now()
	visible, inFlight := 0, 0
	for _, m := range q.msgs {
		switch {
		case m.deleted:
		case m.visibleAt.After(now):
			inFlight++
		default:
			visible++
		}
	}
	all := map[string]string{
		"ApproximateNumberOfMessages":           strconv.Itoa(visible),
		"ApproximateNumberOfMessagesNotVisible": strconv.Itoa(inFlight),
		"ApproximateNumberOfMessagesDelayed":    "0",
		"VisibilityTimeout":                     strconv.Itoa(int(q.visibility / time.Second)),
		"MaximumMessageSize":                    strconv.Itoa(q.maxSize),
		"ReceiveMessageWaitTimeSeconds":         strconv.Itoa(q.wait),
		"QueueArn":                              "arn:aws:sqs:us-east-1:" + AccountID + ":" + q.name,
		"CreatedTimestamp":                      strconv.FormatInt(q.created.Unix(), 10),
		"DelaySeconds":                          "0",
	}
	if q.fifo {
		all["FifoQueue"], all["ContentBasedDeduplication"] = "true", strconv.FormatBool(q.contentDedup)
	}
	out := map[string]string{}
	for _, n := range names {
		if n == "All" {
			out = all
			break
		}
		if v, ok := all[n]; ok {
			out[n] = v
		}
	}
	return struct{ Attributes map[string]string }{out}
}

func (s *Server) deleteQueue(in queueInput) (any, *apiError) {
	return s.onQueue(in.QueueUrl, func(q *queue) (any, *apiError) {
		delete(s.queues, q.name)
		q.notify()
		return empty(nil)
	})
}

func (s *Server) purgeQueue(in queueInput) (any, *apiError) {
	return s.onQueue(in.QueueUrl, func(q *queue) (any, *apiError) {
		q.msgs, q.deleted, q.handles = nil, 0, map[string]*message{}
		return empty(nil)
	})
}

// onQueue runs op on the queue url names, under s.mu: the prologue of every call
// on one queue. A missing queue is QueueDoesNotExist.
func (s *Server) onQueue(url string, op func(q *queue) (any, *apiError)) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, aerr := s.queueByURL(url)
	if aerr != nil {
		return nil, aerr
	}
	return op(q)
}

// empty is the answer of a call that returns nothing: {} or aerr.
func empty(aerr *apiError) (any, *apiError) {
	if aerr != nil {
		return nil, aerr
	}
	return struct{}{}, nil
}

func (s *Server) newMessageID() string {
	s.nextID++
	h := newHandle()
	return fmt.Sprintf("%s-%s-%s-%s-%012x", h[:8], h[8:12], h[12:16], h[16:20], s.nextID)
}

type sendInput struct {
	QueueUrl string
	sendEntry
}

type sendOutput struct {
	Id               string `json:",omitempty"`
	MessageId        string
	MD5OfMessageBody string
	SequenceNumber   string `json:",omitempty"`
}

func (s *Server) sendMessage(in sendInput) (any, *apiError) {
	return s.onQueue(in.QueueUrl, func(q *queue) (any, *apiError) {
		if _, aerr := q.check(in.sendEntry); aerr != nil {
			return nil, aerr
		}
		r := q.send(in.sendEntry, s.now(), s.newMessageID)
		q.notify()
		return sendOutput{MessageId: r.id, MD5OfMessageBody: r.md5, SequenceNumber: r.seq}, nil
	})
}

type batchFailure struct {
	Id          string
	Code        string
	Message     string
	SenderFault bool
}

func failure(id string, e *apiError) batchFailure {
	return batchFailure{Id: id, Code: e.code, Message: e.msg, SenderFault: e.status < 500}
}

// checkBatch applies the rules every batch call shares: 1 to 10 entries with
// distinct, well-formed ids (id gives an entry's).
func checkBatch[E any](entries []E, id func(E) string) *apiError {
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = id(e)
	}
	switch {
	case len(ids) == 0:
		return &apiError{400, "EmptyBatchRequest", "AWS.SimpleQueueService.EmptyBatchRequest", "There should be at least one entry in the request."}
	case len(ids) > MaxBatchEntries:
		return &apiError{400, "TooManyEntriesInBatchRequest", "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", fmt.Sprintf("Maximum number of entries per request are %d. You have sent %d.", MaxBatchEntries, len(ids))}
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if !validBatchEntryID(id) {
			return &apiError{400, "InvalidBatchEntryId", "AWS.SimpleQueueService.InvalidBatchEntryId", fmt.Sprintf("A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most %d letters long.", maxBatchEntryID)}
		}
		if seen[id] {
			return &apiError{400, "BatchEntryIdsNotDistinct", "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", fmt.Sprintf("Id %s repeated.", id)}
		}
		seen[id] = true
	}
	return nil
}

func (s *Server) sendMessageBatch(in struct {
	QueueUrl string
	Entries  []sendEntry
}) (any, *apiError) {
	if aerr := checkBatch(in.Entries, func(e sendEntry) string { return e.Id }); aerr != nil {
		return nil, aerr
	}
	return s.onQueue(in.QueueUrl, func(q *queue) (any, *apiError) { return s.sendBatch(q, in.Entries) })
}

// sendBatch sends the entries of a checked batch to q; s.mu is held.
func (s *Server) sendBatch(q *queue, entries []sendEntry) (any, *apiError) {
	var out struct {
		Successful []sendOutput
		Failed     []batchFailure
	}
	out.Successful, out.Failed = []sendOutput{}, []batchFailure{}
	sizes, total := make([]int, len(entries)), 0
	for i, e := range entries {
		// A well-formed entry counts towards the batch's size even if it fails.
		if e.MessageBody != nil {
			sizes[i] = len(*e.MessageBody)
		}
		total += sizes[i]
	}
	if total > q.maxSize {
		return nil, &apiError{400, "BatchRequestTooLong", "AWS.SimpleQueueService.BatchRequestTooLong", fmt.Sprintf("Batch requests cannot be longer than %d bytes. You have sent %d bytes.", q.maxSize, total)}
	}
	now := s.now()
	for _, e := range entries {
		if _, aerr := q.check(e); aerr != nil {
			out.Failed = append(out.Failed, failure(e.Id, aerr))
			continue
		}
		r := q.send(e, now, s.newMessageID)
		out.Successful = append(out.Successful, sendOutput{Id: e.Id, MessageId: r.id, MD5OfMessageBody: r.md5, SequenceNumber: r.seq})
	}
	q.notify()
	return out, nil
}

type receiveInput struct {
	QueueUrl                    string
	AttributeNames              []string
	MessageSystemAttributeNames []string
	MessageAttributeNames       []string
	MaxNumberOfMessages         *int
	VisibilityTimeout           *int
	WaitTimeSeconds             *int
	ReceiveRequestAttemptId     string
}

type receivedMessage struct {
	MessageId         string
	ReceiptHandle     string
	MD5OfBody         string
	Body              string
	Attributes        map[string]string    `json:",omitempty"`
	MessageAttributes map[string]attrValue `json:",omitempty"`
}

// receiveMessage takes messages at once, or long-polls for up to WaitTimeSeconds
// (the queue's ReceiveMessageWaitTimeSeconds when unset).
func (s *Server) receiveMessage(ctx context.Context, in receiveInput) (any, *apiError) {
	max := 1
	if in.MaxNumberOfMessages != nil {
		max = *in.MaxNumberOfMessages
	}
	if max < 1 || max > MaxBatchEntries {
		return nil, errInvalid("Value %d for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and %d, if provided.", max, MaxBatchEntries)
	}
	s.mu.Lock()
	q, aerr := s.queueByURL(in.QueueUrl)
	s.mu.Unlock()
	if aerr != nil {
		return nil, aerr
	}
	wait, visibility := q.wait, q.visibility
	if in.WaitTimeSeconds != nil {
		wait = *in.WaitTimeSeconds
	}
	if wait < 0 || wait > MaxWaitSeconds {
		return nil, errInvalid("Value %d for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= %d, if provided.", wait, MaxWaitSeconds)
	}
	if in.VisibilityTimeout != nil {
		if *in.VisibilityTimeout < 0 || *in.VisibilityTimeout > MaxVisibility {
			return nil, errInvalid("Value %d for parameter VisibilityTimeout is invalid. Reason: Must be between 0 and %d.", *in.VisibilityTimeout, MaxVisibility)
		}
		visibility = time.Duration(*in.VisibilityTimeout) * time.Second
	}
	names := append(append([]string(nil), in.AttributeNames...), in.MessageSystemAttributeNames...)
	deadline := time.Now().Add(time.Duration(wait) * time.Second)
	for {
		s.mu.Lock()
		if s.queues[q.name] != q {
			s.mu.Unlock()
			return nil, errNoQueue()
		}
		now := s.now()
		got, again := q.retried(in.ReceiveRequestAttemptId, now)
		if again {
			s.retriedReceives++
		} else {
			got = q.take(max, visibility, now)
			q.remember(in.ReceiveRequestAttemptId, got, now)
		}
		changed := q.changed
		var msgs []receivedMessage
		for _, m := range got {
			msgs = append(msgs, receivedMessage{MessageId: m.id, ReceiptHandle: m.handle, MD5OfBody: md5Hex(m.body), Body: m.body,
				Attributes: q.system(m, names), MessageAttributes: userAttrs(m, in.MessageAttributeNames)})
		}
		s.mu.Unlock()
		left := time.Until(deadline)
		if len(msgs) > 0 || left <= 0 {
			return struct{ Messages []receivedMessage }{msgs}, nil
		}
		// Visibility timeouts expire without a notification (and the clock may be
		// moved): look again at least every 100 ms.
		t := time.NewTimer(min(left, 100*time.Millisecond))
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return struct{ Messages []receivedMessage }{}, nil
		case <-s.closed:
			t.Stop()
			return struct{ Messages []receivedMessage }{}, nil
		}
		t.Stop()
	}
}

type handleInput struct {
	QueueUrl          string
	Id                string `json:",omitempty"`
	ReceiptHandle     string
	VisibilityTimeout int
}

func (s *Server) deleteMessage(in handleInput) (any, *apiError) {
	return s.onQueue(in.QueueUrl, func(q *queue) (any, *apiError) { return empty(q.remove(in.ReceiptHandle)) })
}

type batchOutput struct {
	Successful []struct{ Id string }
	Failed     []batchFailure
}

// batch runs one handle operation per entry of a batch.
func (s *Server) batch(queueURL string, entries []handleInput, op func(*queue, handleInput) *apiError) (any, *apiError) {
	if aerr := checkBatch(entries, func(e handleInput) string { return e.Id }); aerr != nil {
		return nil, aerr
	}
	return s.onQueue(queueURL, func(q *queue) (any, *apiError) {
		out := batchOutput{Successful: []struct{ Id string }{}, Failed: []batchFailure{}}
		for _, e := range entries {
			if aerr := op(q, e); aerr != nil {
				out.Failed = append(out.Failed, failure(e.Id, aerr))
				continue
			}
			out.Successful = append(out.Successful, struct{ Id string }{e.Id})
		}
		return out, nil
	})
}

func (s *Server) deleteMessageBatch(in struct {
	QueueUrl string
	Entries  []handleInput
}) (any, *apiError) {
	return s.batch(in.QueueUrl, in.Entries, func(q *queue, e handleInput) *apiError { return q.remove(e.ReceiptHandle) })
}

func (s *Server) changeVisibility(in handleInput) (any, *apiError) {
	return s.onQueue(in.QueueUrl, func(q *queue) (any, *apiError) {
		return empty(q.setVisibility(in.ReceiptHandle, in.VisibilityTimeout, s.now()))
	})
}

func (s *Server) changeVisibilityBatch(in struct {
	QueueUrl string
	Entries  []handleInput
}) (any, *apiError) {
	now := s.now()
	return s.batch(in.QueueUrl, in.Entries, func(q *queue, e handleInput) *apiError {
		return q.setVisibility(e.ReceiptHandle, e.VisibilityTimeout, now)
	})
}
