package idemamqp

import (
	"bytes"
	"errors"
	"maps"
	"math"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemhq/idem"
)

// FuzzDelivery checks the mapping between idem messages and AMQP: a message the
// sink accepts comes back from the source unchanged; headers of any type from any
// publisher never panic the source, never leak the broker's delivery counts, and
// give an attempt of at least 1 on a quorum queue, whatever count they claim.
func FuzzDelivery(f *testing.F) {
	f.Add("order-1", "orders", "Trace-Id", "abc", "n", int64(3), int64(2), int64(0), false, []byte(`{}`))
	f.Add("", "orders", idem.HeaderID, "from-header", headerDeliveryCount, int64(1), int64(-5), int64(0), true, []byte{})
	f.Add("k", "q", headerAcquiredCount, "x", "big", int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MinInt64), true, []byte(nil))
	f.Add("k", "q", "a", "b", "c", int64(0), int64(math.MaxInt64), int64(0), false, []byte(nil))
	f.Add("k", "q", "a", "b", "c", int64(0), int64(-7), int64(-2), false, []byte(nil))
	f.Fuzz(func(t *testing.T, id, topic, k1, v1, k2 string, n2, delivered, acquired int64, redelivered bool, payload []byte) {
		m := idem.Message{ID: id, Topic: topic, Payload: payload, Headers: map[string]string{k1: v1}}
		if err := validateMessage(m); err == nil {
			p := publishing(m)
			got := toDelivery(amqp.Delivery{MessageId: p.MessageId, RoutingKey: topic, Headers: p.Headers, Body: p.Body}, "", false, nil)
			want := maps.Clone(m.Headers)
			delete(want, idem.HeaderID)
			delete(want, headerDeliveryCount)
			delete(want, headerAcquiredCount)
			if len(want) == 0 {
				want = nil
			}
			if got.ID != m.ID || got.Topic != m.Topic || !bytes.Equal(got.Payload, m.Payload) || !maps.Equal(got.Headers, want) {
				t.Fatalf("round trip changed the message:\n sent %+v\n  got %+v", m, got.Message)
			}
		} else if !errors.Is(err, idem.ErrInvalid) {
			t.Fatalf("validateMessage(%+v) = %v, want an *idem.InputError", m, err)
		}

		// Headers of any AMQP type another publisher (or the broker) may send.
		h := amqp.Table{k1: v1, k2: n2, headerDeliveryCount: delivered, headerAcquiredCount: acquired}
		d := amqp.Delivery{MessageId: id, RoutingKey: topic, Headers: h, Body: payload, Redelivered: redelivered}
		for _, quorum := range []bool{false, true} {
			got := toDelivery(d, "", quorum, nil)
			if _, ok := got.Headers[headerDeliveryCount]; ok {
				t.Fatalf("delivered the broker's count as a header: %+v", got.Headers)
			}
			if quorum && got.Attempt < 1 || !quorum && got.Attempt != 0 {
				t.Fatalf("quorum %v, counts %d/%d, redelivered %v: Attempt %d, want ≥ 1 on a quorum queue, 0 on a classic one",
					quorum, delivered, acquired, redelivered, got.Attempt)
			}
			if redelivered && quorum && got.Attempt < 2 {
				t.Fatalf("a redelivered message has Attempt %d, want ≥ 2", got.Attempt)
			}
			if err := got.Validate(); err != nil && !errors.Is(err, idem.ErrInvalid) {
				t.Fatalf("Validate = %v, want nil or an *idem.InputError", err)
			}
		}
	})
}
