package idemamqp

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	amqp "github.com/rabbitmq/amqp091-go"
)

func TestSourceConfigDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := SourceConfig{Queue: "q"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Prefetch != DefaultPrefetch || cfg.MaxNakDelay != DefaultMaxNakDelay {
		t.Errorf("defaults: %+v", cfg)
	}
	if cfg, _ := (SourceConfig{Queue: "q", MaxNakDelay: -1}).withDefaults(); cfg.MaxNakDelay >= 0 {
		t.Errorf("a negative MaxNakDelay was replaced: %v", cfg.MaxNakDelay)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 256)
	for _, tt := range []struct {
		field string
		err   error
	}{
		{"SourceConfig.Queue", func() error { _, err := SourceConfig{}.withDefaults(); return err }()},
		{"SourceConfig.Queue", func() error { _, err := SourceConfig{Queue: long}.withDefaults(); return err }()},
		{"SourceConfig.ConsumerTag", func() error { _, err := SourceConfig{Queue: "q", ConsumerTag: long}.withDefaults(); return err }()},
		{"SourceConfig.Prefetch", func() error { _, err := SourceConfig{Queue: "q", Prefetch: -1}.withDefaults(); return err }()},
		{"SourceConfig.Prefetch", func() error { _, err := SourceConfig{Queue: "q", Prefetch: 1 << 16}.withDefaults(); return err }()},
		{"SinkConfig.Exchange", func() error { _, err := SinkConfig{Exchange: long}.withDefaults(); return err }()},
		{"name", QueueConfig{}.validate("")},
		{"name", QueueConfig{}.validate(long)},
		{"QueueConfig.DeadLetterExchange", QueueConfig{DeadLetterExchange: long}.validate("q")},
		{"QueueConfig.DeadLetterRoutingKey", QueueConfig{DeadLetterRoutingKey: long}.validate("q")},
		{"QueueConfig.DeliveryLimit", QueueConfig{Quorum: true, DeliveryLimit: -1}.validate("q")},
		{"QueueConfig.DeliveryLimit", QueueConfig{DeliveryLimit: 5}.validate("q")},
		{"Message.Topic", validateMessage(idem.Message{ID: "x", Topic: long})},
		{"Message.Headers", validateMessage(idem.Message{ID: "x", Topic: "t", Headers: map[string]string{long: "v"}})},
		{"Message.ID", validateMessage(idem.Message{Topic: "t"})},
	} {
		var ie *idem.InputError
		if !errors.As(tt.err, &ie) || ie.Field != tt.field || ie.Fix == "" {
			t.Errorf("want an *idem.InputError for %s with a fix, got %v", tt.field, tt.err)
		}
	}
	if err := (QueueConfig{Quorum: true, DeliveryLimit: 5, DeadLetterExchange: "dlx"}).validate("q"); err != nil {
		t.Errorf("a valid quorum queue config: %v", err)
	}
}

func TestAttempt(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		d      amqp.Delivery
		quorum bool
		want   int
	}{
		{"classic first", amqp.Delivery{}, false, 0},
		{"classic redelivered", amqp.Delivery{Redelivered: true}, false, 0},
		{"quorum first", amqp.Delivery{}, true, 1},
		{"quorum counted", amqp.Delivery{Redelivered: true, Headers: amqp.Table{"x-delivery-count": int64(2)}}, true, 3},
		{"rabbitmq 4 acquired", amqp.Delivery{Redelivered: true, Headers: amqp.Table{"x-delivery-count": int64(0), "x-acquired-count": int64(3)}}, true, 4},
		{"redelivered uncounted", amqp.Delivery{Redelivered: true}, true, 2},
	} {
		if got := attempt(tt.d, tt.quorum); got != tt.want {
			t.Errorf("%s: Attempt %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestDeliveryMapping(t *testing.T) {
	t.Parallel()
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	d := toDelivery(amqp.Delivery{RoutingKey: "orders", Body: []byte("b"), Headers: amqp.Table{
		idem.HeaderID: "h-id", "x-delivery-count": int64(1), "s": "v", "b": []byte("raw"), "n": int64(7), "t": ts, "nil": nil,
	}}, "queue q delivery tag 1", true, nil)
	want := map[string]string{"s": "v", "b": "raw", "n": "7", "t": "2026-01-02T03:04:05Z", "nil": ""}
	if d.ID != "h-id" || d.Topic != "orders" || string(d.Payload) != "b" || d.Attempt != 2 || len(d.Headers) != len(want) {
		t.Fatalf("delivery %+v", d)
	}
	for k, v := range want {
		if d.Headers[k] != v {
			t.Errorf("header %s = %q, want %q", k, d.Headers[k], v)
		}
	}
	if d := toDelivery(amqp.Delivery{MessageId: "native", Headers: amqp.Table{idem.HeaderID: "h-id"}}, "", false, nil); d.ID != "native" || d.Headers != nil {
		t.Errorf("the message-id property wins over the header, which is dropped: %+v", d.Message)
	}
}

func TestPublishingMapping(t *testing.T) {
	t.Parallel()
	p := publishing(idem.Message{ID: "id", Topic: "t", Headers: map[string]string{"a": "b"}, Payload: []byte("x")})
	if p.MessageId != "id" || p.Headers["a"] != "b" || p.DeliveryMode != amqp.Persistent || string(p.Body) != "x" {
		t.Errorf("publishing %+v", p)
	}
	if p := publishing(idem.Message{ID: "id", Topic: "t"}); p.Headers != nil {
		t.Errorf("no headers became %v", p.Headers)
	}
}
