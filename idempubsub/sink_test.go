package idempubsub_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempubsub"
	"github.com/idemhq/idem/idemtest"
)

// TestPublishRefusesBadInput: what Pub/Sub would refuse (and fail the whole
// request for), or would hand back as something else, is an *idem.InputError
// naming the field, and nothing of the batch is sent.
func TestPublishRefusesBadInput(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	topic, sub := f.topicSub(t, idempubsub.SubscriptionConfig{})
	sink := f.sink(t)
	many := map[string]string{}
	for i := range 100 {
		many[fmt.Sprint("h", i)] = "v"
	}
	ok := idem.Message{ID: "ok", Topic: topic, Payload: []byte("x")}
	for _, c := range []struct {
		name, field string
		mutate      func(m *idem.Message)
	}{
		{"attribute key too long", "Message.Headers", func(m *idem.Message) { m.Headers = map[string]string{strings.Repeat("k", 257): "v"} }},
		{"attribute value too long", "Message.Headers", func(m *idem.Message) { m.Headers = map[string]string{"k": strings.Repeat("v", 1025)} }},
		{"too many attributes", "Message.Headers", func(m *idem.Message) { m.Headers = many }},
		{"reserved goog prefix", "Message.Headers", func(m *idem.Message) { m.Headers = map[string]string{"googclient_x": "v"} }},
		{"ID header", "Message.Headers", func(m *idem.Message) { m.Headers = map[string]string{"idem-msg-id": "other"} }},
		{"empty header name", "Message.Headers", func(m *idem.Message) { m.Headers = map[string]string{"": "v"} }},
		{"invalid UTF-8 value", "Message.Headers", func(m *idem.Message) { m.Headers = map[string]string{"k": "\xff"} }},
		{"ordering key too long", "Message.OrderingKey", func(m *idem.Message) { m.OrderingKey = strings.Repeat("o", 1025) }},
		{"ordering key not UTF-8", "Message.OrderingKey", func(m *idem.Message) { m.OrderingKey = "\xc3" }},
		{"short topic", "Message.Topic", func(m *idem.Message) { m.Topic = "ab" }},
		{"topic starting with a digit", "Message.Topic", func(m *idem.Message) { m.Topic = "1orders" }},
		{"reserved topic", "Message.Topic", func(m *idem.Message) { m.Topic = "google-orders" }},
		{"topic with a space", "Message.Topic", func(m *idem.Message) { m.Topic = "my orders" }},
		{"malformed full name", "Message.Topic", func(m *idem.Message) { m.Topic = "projects/p/subscriptions/orders" }},
		{"missing ID", "Message.ID", func(m *idem.Message) { m.ID = "" }},
		{"oversized payload", "Message.Payload", func(m *idem.Message) { m.Payload = make([]byte, idem.MaxPayload+1) }},
	} {
		m := ok
		m.ID = "bad-" + c.name
		c.mutate(&m)
		err := sink.Publish(context.Background(), ok, m)
		var ie *idem.InputError
		if !errors.As(err, &ie) || !strings.HasPrefix(ie.Field, c.field) || !strings.Contains(err.Error(), "message 1 of the batch") {
			t.Errorf("%s: Publish = %v, want an *idem.InputError on %s for message 1", c.name, err, c.field)
		}
	}
	if got := idemtest.Receive(t, f.source(t, idempubsub.SourceConfig{Subscription: sub}), 1, 2*time.Second); len(got) != 0 {
		t.Fatalf("a refused batch was partly sent: %s arrived", got[0].ID)
	}
}

// TestPublishLargeBatch: a batch larger than one Publish request (1,000 messages)
// and a batch spanning two topics each arrive whole, every message with its ID,
// ordering key and headers.
func TestPublishLargeBatch(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	topic1, sub1 := f.topicSub(t, idempubsub.SubscriptionConfig{})
	topic2, sub2 := f.topicSub(t, idempubsub.SubscriptionConfig{})
	var msgs []idem.Message
	for i := range 2500 {
		topic := topic1
		if i >= 2400 {
			topic = topic2
		}
		msgs = append(msgs, idem.Message{ID: fmt.Sprint("m-", i), Topic: topic, OrderingKey: fmt.Sprint(i % 3),
			Headers: map[string]string{"n": fmt.Sprint(i)}, Payload: []byte("x")})
	}
	idemtest.Publish(t, f.sink(t), msgs...)
	seen := map[string]bool{}
	for sub, n := range map[string]int{sub1: 2400, sub2: 100} {
		src := f.source(t, idempubsub.SourceConfig{Subscription: sub, MaxOutstanding: n})
		for _, d := range idemtest.ReceiveN(t, src, n) {
			if d.Headers["n"] != strings.TrimPrefix(d.ID, "m-") || d.OrderingKey == "" || seen[d.ID] {
				t.Fatalf("delivery %+v: header n, ordering key or uniqueness wrong", d.Message)
			}
			seen[d.ID] = true
			idemtest.Ack(t, d)
		}
	}
}

// TestPublishMissingTopic: a topic that does not exist is a backend error that
// names it and the fix.
func TestPublishMissingTopic(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	err := f.sink(t).Publish(context.Background(), idem.Message{ID: "a", Topic: "nowhere", Payload: []byte("x")})
	var be *idem.BackendError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), "nowhere") || !strings.Contains(err.Error(), "EnsureTopic") {
		t.Fatalf("Publish to a missing topic = %v, want a BackendError naming it and EnsureTopic", err)
	}
}

// A batch whose later request fails (its topic is missing) after an earlier one
// was stored says which messages were accepted (idem.PublishError), so the outbox
// relay sends only the others again.
func TestPublishPartlyAccepted(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	topic, _ := f.topicSub(t, idempubsub.SubscriptionConfig{})
	err := f.sink(t).Publish(context.Background(),
		idem.Message{ID: "a", Topic: topic, Payload: []byte("1")},
		idem.Message{ID: "b", Topic: topic, Payload: []byte("2")},
		idem.Message{ID: "c", Topic: "nowhere", Payload: []byte("3")})
	var pe *idem.PublishError
	if !errors.As(err, &pe) || fmt.Sprint(pe.Accepted) != "[true true false]" {
		t.Fatalf("Publish = %v (%T), want an *idem.PublishError accepting a and b", err, err)
	}
	var be *idem.BackendError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), "nowhere") {
		t.Fatalf("Publish = %v, want the BackendError naming the missing topic inside", err)
	}
}

// TestConfigValidation: bad configurations are refused naming the field.
func TestConfigValidation(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	ctx := context.Background()
	for _, c := range []struct {
		cfg   idempubsub.SourceConfig
		field string
	}{
		{idempubsub.SourceConfig{}, "SourceConfig.Subscription"},
		{idempubsub.SourceConfig{Subscription: "sub-1", Lease: 5 * time.Second}, "SourceConfig.Lease"},
		{idempubsub.SourceConfig{Subscription: "sub-1", Lease: 10500 * time.Millisecond}, "SourceConfig.Lease"},
		{idempubsub.SourceConfig{Subscription: "sub-1", Lease: time.Minute, MaxExtension: time.Second}, "SourceConfig.MaxExtension"},
		{idempubsub.SourceConfig{Subscription: "sub-1", MaxOutstanding: -1}, "SourceConfig.MaxOutstanding"},
		{idempubsub.SourceConfig{Subscription: "sub-1", PullWait: time.Millisecond}, "SourceConfig.PullWait"},
	} {
		_, err := idempubsub.NewSource(ctx, f.client, c.cfg)
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("NewSource(%+v) = %v, want an InputError on %s", c.cfg, err, c.field)
		}
	}
	for _, c := range []struct {
		cfg   idempubsub.SubscriptionConfig
		field string
	}{
		{idempubsub.SubscriptionConfig{Name: "sub-1"}, "SubscriptionConfig.Topic"},
		{idempubsub.SubscriptionConfig{Name: "sub-1", Topic: "top-1", AckDeadline: time.Hour}, "SubscriptionConfig.AckDeadline"},
		{idempubsub.SubscriptionConfig{Name: "sub-1", Topic: "top-1", DeadLetterTopic: "dead-1", MaxDeliveryAttempts: 3}, "SubscriptionConfig.MaxDeliveryAttempts"},
		{idempubsub.SubscriptionConfig{Name: "sub-1", Topic: "top-1", MaxDeliveryAttempts: 10}, "SubscriptionConfig.MaxDeliveryAttempts"},
	} {
		err := idempubsub.EnsureSubscription(ctx, f.client, c.cfg)
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("EnsureSubscription(%+v) = %v, want an InputError on %s", c.cfg, err, c.field)
		}
	}
	if _, err := idempubsub.NewSink(nil, idempubsub.SinkConfig{}); !errors.Is(err, idem.ErrInvalid) {
		t.Errorf("NewSink(nil) = %v, want idem.ErrInvalid", err)
	}
}
