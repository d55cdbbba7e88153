package idemsqs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsqs"
	"github.com/idemhq/idem/idemtest"
)

// TestSinkRefuses: what SQS would refuse, or would change, is an *idem.InputError
// naming the field before anything is sent; the batch it was in sends nothing.
func TestSinkRefuses(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, idemsqs.QueueConfig{})
	many := map[string]string{}
	for i := range 11 {
		many[fmt.Sprintf("h%d", i)] = "v"
	}
	for _, tc := range []struct {
		name, field string
		m           idem.Message
	}{
		{"standard queue", "Message.Topic", idem.Message{Topic: "orders"}},
		{"11 headers", "Message.Headers", idem.Message{Headers: many}},
		{"10 headers and a binary payload", "Message.Headers", idem.Message{Headers: func() map[string]string {
			h := map[string]string{}
			for i := range 10 {
				h[fmt.Sprintf("h%d", i)] = "v"
			}
			return h
		}(), Payload: []byte{0xff}}},
		{"header name with a space", "Message.Headers", idem.Message{Headers: map[string]string{"Trace Id": "x"}}},
		{"header name AWS reserves", "Message.Headers", idem.Message{Headers: map[string]string{"aws.trace": "x"}}},
		{"header name with ..", "Message.Headers", idem.Message{Headers: map[string]string{"a..b": "x"}}},
		{"empty header value", "Message.Headers", idem.Message{Headers: map[string]string{"tracestate": ""}}},
		{"control character in a value", "Message.Headers", idem.Message{Headers: map[string]string{"x": "a\x01b"}}},
		{"header spoofing the id", "Message.Headers", idem.Message{Headers: map[string]string{idem.HeaderID: "other"}}},
		{"header spoofing the encoding", "Message.Headers", idem.Message{Headers: map[string]string{idemsqs.AttrBodyEncoding: "base64"}}},
		{"payload over 256 KiB", "Message.Payload", idem.Message{Payload: []byte(strings.Repeat("x", 256<<10+1))}},
		{"binary payload over 256 KiB once base64", "Message.Payload", idem.Message{Payload: make([]byte, 200<<10)}},
		{"missing id", "Message.ID", idem.Message{ID: "-"}},
	} {
		m := tc.m
		if m.ID == "" {
			m.ID = "bad-" + strings.ReplaceAll(tc.name, " ", "-")
		} else if m.ID == "-" {
			m.ID = ""
		}
		if m.Topic == "" {
			m.Topic = f.queue
		}
		ok := idem.Message{ID: "fine", Topic: f.queue, Payload: []byte("x")}
		err := f.sink.Publish(context.Background(), ok, m)
		var ie *idem.InputError
		if !errors.As(err, &ie) || !strings.HasPrefix(ie.Field, tc.field) {
			t.Errorf("%s: Publish = %v, want an *idem.InputError on %s", tc.name, err, tc.field)
		}
	}
	if !settledQueue(t, f.c, f.url) {
		t.Fatal("a refused batch sent messages")
	}
	// At the limit exactly, counted as SQS counts (body plus attribute names, types
	// and values), SQS accepts it.
	h := map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	exact := idem.Message{ID: "exact", Topic: f.queue, Headers: h,
		Payload: []byte(strings.Repeat("x", 256<<10-len("traceparent")-len("String")-len(h["traceparent"])))}
	if err := f.sink.Publish(context.Background(), exact); err != nil {
		t.Fatalf("a message of exactly 256 KiB: %v", err)
	}
}

// TestBadInputDeadLetters: messages from other producers that cannot be used are
// delivered, not dropped, and the inbox dead-letters each with a reason: a body
// marked base64 that is not, an id attribute with a control character, an id longer
// than a key may be, and a message on a standard queue with no id at all.
func TestBadInputDeadLetters(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, idemsqs.QueueConfig{})
	bin := func(b string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("Binary"), BinaryValue: []byte(b)}
	}
	sendRaw(t, f.c, f.url, "not base64!", "d1", "g", map[string]types.MessageAttributeValue{idemsqs.AttrBodyEncoding: str("base64")})
	sendRaw(t, f.c, f.url, "x", "d2", "g", map[string]types.MessageAttributeValue{idemsqs.AttrBodyEncoding: str("zstd")})
	sendRaw(t, f.c, f.url, "x", "d3", "g", map[string]types.MessageAttributeValue{idem.HeaderID: bin("id\x00with-nul")})
	sendRaw(t, f.c, f.url, "x", "d4", "g", map[string]types.MessageAttributeValue{idem.HeaderID: str(strings.Repeat("k", 300))})
	sendRaw(t, f.c, f.url, "fine", "good-1", "g", nil) // content from another producer: its dedup id is its id

	l := newLedger(t, f.source(t, idemsqs.SourceConfig{}))
	l.runUntil(t, "everything settled", func() bool { return settledQueue(t, f.c, f.url) })
	if n := l.rows(t, "good-1"); n != 1 {
		t.Fatalf("the good message was applied %d times, want 1", n)
	}
	dls, err := l.consumer.DeadLetters(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"not base64", "unknown " + idemsqs.AttrBodyEncoding, "control character", "longer than 255"}
	if len(dls) != len(want) {
		t.Fatalf("%d dead letters, want %d: %+v", len(dls), len(want), dls)
	}
	for _, w := range want {
		found := false
		for _, dl := range dls {
			found = found || strings.Contains(dl.Reason+" "+dl.Message.Headers[idemsqs.HeaderDecodeError], w)
		}
		if !found {
			t.Errorf("no dead letter says %q: %+v", w, dls)
		}
	}

	// A standard queue: no dedup id, and this producer set no id attribute.
	out, err := f.c.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String("std-" + strings.TrimSuffix(f.queue, ".fifo"))})
	if err != nil {
		t.Fatal(err)
	}
	std := aws.ToString(out.QueueUrl)
	sendRaw(t, f.c, std, "anonymous", "", "", nil)
	src, err := idemsqs.NewSource(context.Background(), f.c, idemsqs.SourceConfig{Queue: std})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if ft := src.Features(); ft.Dedup || ft.OrderedPerKey || !ft.Attempts {
		t.Errorf("a standard queue's features: %+v, want no dedup, no order, attempts", ft)
	}
	l2 := newLedger(t, src)
	l2.runUntil(t, "the anonymous message settled", func() bool { return settledQueue(t, f.c, std) })
	dls, err = l2.consumer.DeadLetters(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].Kind != "no_key" || string(dls[0].Message.Payload) != "anonymous" {
		t.Fatalf("dead letters %+v, want the anonymous message as no_key", dls)
	}
}

// TestPublishPartlyAccepted: a batch over two queues whose second is missing fails
// after SQS stored the first queue's messages; the error says so (an
// *idem.PublishError), and the outbox relay sends only the others again.
func TestPublishPartlyAccepted(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, idemsqs.QueueConfig{})
	msgs := []idem.Message{
		{ID: "a", Topic: f.queue, Payload: []byte("a")},
		{ID: "b", Topic: f.queue, Payload: []byte("b")},
		{ID: "c", Topic: "missing-" + f.queue, Payload: []byte("c")},
	}
	err := f.sink.Publish(context.Background(), msgs...)
	var pe *idem.PublishError
	if !errors.As(err, &pe) || fmt.Sprint(pe.Accepted) != "[true true false]" {
		t.Fatalf("Publish = %v, want an *idem.PublishError accepting a and b", err)
	}
	var be *idem.BackendError
	if !errors.As(err, &be) || be.Op != "publish" {
		t.Errorf("Publish = %v, want it to wrap the *idem.BackendError", err)
	}
	got := idemtest.ReceiveN(t, f.source(t, idemsqs.SourceConfig{}), 2)
	if got[0].ID != "a" || got[1].ID != "b" {
		t.Errorf("the queue holds %s, %s; want a, b", got[0].ID, got[1].ID)
	}
	// Nothing stored: a plain BackendError.
	if err := f.sink.Publish(context.Background(), msgs[2]); !errors.As(err, &be) || errors.As(err, &pe) {
		t.Errorf("Publish of the missing queue's message alone = %v, want a *idem.BackendError and no PublishError", err)
	}
}
