package sqsfake_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/idemhq/idem/idemsqs/sqsfake"
)

type env struct {
	t    *testing.T
	c    *sqs.Client
	url  string
	skew *atomic.Int64
}

func start(t *testing.T, attrs map[string]string) env {
	t.Helper()
	skew := &atomic.Int64{}
	srv, err := sqsfake.Start(sqsfake.Config{Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	c := srv.Client()
	out, err := c.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String("q.fifo"), Attributes: attrs})
	if err != nil {
		t.Fatal(err)
	}
	return env{t, c, aws.ToString(out.QueueUrl), skew}
}

func (e env) send(body, dedup, group string) error {
	_, err := e.c.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(e.url), MessageBody: aws.String(body),
		MessageDeduplicationId: aws.String(dedup), MessageGroupId: aws.String(group)})
	return err
}

func (e env) receive(max int32) []types.Message {
	e.t.Helper()
	out, err := e.c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.url), MaxNumberOfMessages: max,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	if err != nil {
		e.t.Fatal(err)
	}
	return out.Messages
}

func (e env) remove(m types.Message) {
	e.t.Helper()
	if _, err := e.c.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(e.url), ReceiptHandle: m.ReceiptHandle}); err != nil {
		e.t.Fatal(err)
	}
}

func bodies(ms []types.Message) string {
	var b []string
	for _, m := range ms {
		b = append(b, aws.ToString(m.Body))
	}
	return strings.Join(b, ",")
}

// TestDedupWindow: a dedup id is remembered for 5 minutes from its first send,
// even after its message was received and deleted (goaws forgets it then), and
// forgotten after.
func TestDedupWindow(t *testing.T) {
	t.Parallel()
	e := start(t, map[string]string{"FifoQueue": "true"})
	for _, body := range []string{"a", "a again"} {
		if err := e.send(body, "id-1", "g"); err != nil {
			t.Fatal(err)
		}
	}
	got := e.receive(10)
	if bodies(got) != "a" {
		t.Fatalf("got %q, want a (the re-send dropped)", bodies(got))
	}
	e.remove(got[0])
	e.skew.Store(int64(sqsfake.DedupWindow - time.Second))
	_ = e.send("a after delete", "id-1", "g")
	if got := e.receive(10); len(got) != 0 {
		t.Fatalf("a re-send within the window after the delete was delivered: %q", bodies(got))
	}
	e.skew.Store(int64(sqsfake.DedupWindow + time.Second))
	_ = e.send("a after the window", "id-1", "g")
	if got := e.receive(10); bodies(got) != "a after the window" {
		t.Fatalf("after the window got %q", bodies(got))
	}
}

// TestGroups: a group's messages come in order, together, and none of a group
// while one of it is in flight; other groups go on. A stale receipt handle deletes
// nothing (and succeeds, as SQS documents).
func TestGroups(t *testing.T) {
	t.Parallel()
	e := start(t, map[string]string{"FifoQueue": "true", "VisibilityTimeout": "30"})
	for i, g := range []string{"x", "y", "x", "y", "x"} {
		if err := e.send(g+string(rune('0'+i)), "d"+string(rune('0'+i)), g); err != nil {
			t.Fatal(err)
		}
	}
	first := e.receive(2)
	if bodies(first) != "x0,x2" {
		t.Fatalf("first receive %q, want x0,x2 (one group together, in order)", bodies(first))
	}
	second := e.receive(10)
	if bodies(second) != "y1,y3" {
		t.Fatalf("second receive %q, want y1,y3 (group x held while x0 and x2 are in flight)", bodies(second))
	}
	if got := e.receive(10); len(got) != 0 {
		t.Fatalf("got %q while both groups are in flight", bodies(got))
	}
	e.skew.Store(int64(31 * time.Second)) // x0, x2 visible again
	again := e.receive(10)
	if !strings.HasPrefix(bodies(again), "x0,x2") || again[0].Attributes["ApproximateReceiveCount"] != "2" {
		t.Fatalf("after the timeout %q (receive count %s), want x0 again first", bodies(again), again[0].Attributes["ApproximateReceiveCount"])
	}
	e.remove(first[0]) // stale handle: succeeds, deletes nothing
	e.remove(again[0])
	e.remove(again[0]) // deleting a deleted message succeeds
	_, err := e.c.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(e.url), ReceiptHandle: aws.String("bogus")})
	var bad *types.ReceiptHandleIsInvalid
	if !errors.As(err, &bad) {
		t.Fatalf("delete with a bogus handle = %v, want ReceiptHandleIsInvalid", err)
	}
}

// TestLimits: SQS's refusals, with the codes SQS reports to the SDK (its query-compatible
// x-amzn-query-error codes).
func TestLimits(t *testing.T) {
	t.Parallel()
	e := start(t, map[string]string{"FifoQueue": "true", "MaximumMessageSize": "1024"})
	code := func(err error) string {
		var ae smithy.APIError
		if errors.As(err, &ae) {
			return ae.ErrorCode()
		}
		return ""
	}
	attrs := map[string]types.MessageAttributeValue{}
	for i := range 11 {
		attrs["a"+string(rune('a'+i))] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("v")}
	}
	for _, tc := range []struct {
		name, want string
		in         sqs.SendMessageInput
	}{
		{"too large", "InvalidParameterValue", sqs.SendMessageInput{MessageBody: aws.String(strings.Repeat("x", 1025))}},
		{"no group", "MissingParameter", sqs.SendMessageInput{MessageBody: aws.String("x"), MessageGroupId: aws.String("")}},
		{"no dedup id", "InvalidParameterValue", sqs.SendMessageInput{MessageBody: aws.String("x"), MessageDeduplicationId: aws.String("")}},
		{"control character", "InvalidMessageContents", sqs.SendMessageInput{MessageBody: aws.String("a\x00b")}},
		{"11 attributes", "InvalidParameterValue", sqs.SendMessageInput{MessageBody: aws.String("x"), MessageAttributes: attrs}},
		{"reserved attribute name", "InvalidAttributeName", sqs.SendMessageInput{MessageBody: aws.String("x"),
			MessageAttributes: map[string]types.MessageAttributeValue{"AWS.x": {DataType: aws.String("String"), StringValue: aws.String("v")}}}},
		{"empty attribute value", "InvalidParameterValue", sqs.SendMessageInput{MessageBody: aws.String("x"),
			MessageAttributes: map[string]types.MessageAttributeValue{"a": {DataType: aws.String("String"), StringValue: aws.String("")}}}},
	} {
		in := tc.in
		in.QueueUrl = aws.String(e.url)
		if in.MessageGroupId == nil {
			in.MessageGroupId = aws.String("g")
		}
		if in.MessageDeduplicationId == nil {
			in.MessageDeduplicationId = aws.String("d")
		}
		_, err := e.c.SendMessage(context.Background(), &in)
		if code(err) != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
	entries := make([]types.SendMessageBatchRequestEntry, 11)
	for i := range entries {
		entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(string(rune('a' + i))), MessageBody: aws.String("x"),
			MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String(string(rune('a' + i)))}
	}
	_, err := e.c.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(e.url), Entries: entries})
	var tooMany *types.TooManyEntriesInBatchRequest
	if !errors.As(err, &tooMany) {
		t.Errorf("a batch of 11: %v, want TooManyEntriesInBatchRequest", err)
	}
	_, err = e.c.GetQueueUrl(context.Background(), &sqs.GetQueueUrlInput{QueueName: aws.String("missing")})
	var missing *types.QueueDoesNotExist
	if !errors.As(err, &missing) {
		t.Errorf("GetQueueUrl(missing) = %v, want QueueDoesNotExist", err)
	}
}

// TestReceiveAttemptID: a retried receive (same ReceiveRequestAttemptId) gets the
// messages the first try took, with the same handles, instead of leaving them
// invisible; once they are settled, the id takes new messages.
func TestReceiveAttemptID(t *testing.T) {
	t.Parallel()
	e := start(t, map[string]string{"FifoQueue": "true"})
	for _, b := range []string{"a", "b"} {
		if err := e.send(b, b, b); err != nil {
			t.Fatal(err)
		}
	}
	recv := func() []types.Message {
		out, err := e.c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.url), MaxNumberOfMessages: 1,
			ReceiveRequestAttemptId: aws.String("try-1")})
		if err != nil {
			t.Fatal(err)
		}
		return out.Messages
	}
	first, retry := recv(), recv()
	if bodies(first) != "a" || bodies(retry) != "a" || aws.ToString(first[0].ReceiptHandle) != aws.ToString(retry[0].ReceiptHandle) {
		t.Fatalf("first %q, retry %q: want a twice, same handle", bodies(first), bodies(retry))
	}
	e.remove(first[0])
	if next := recv(); bodies(next) != "b" {
		t.Fatalf("after the delete the same attempt id got %q, want b", bodies(next))
	}
}
