package idemamqp

import (
	"fmt"
	"math"
	"reflect"
	"time"

	"github.com/idemhq/idem"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Headers quorum queues add to count deliveries. They are read into
// Delivery.Attempt and left out of Delivery.Headers.
const (
	headerDeliveryCount = "x-delivery-count" // every return before RabbitMQ 4.0; failed ones from 4.0
	headerAcquiredCount = "x-acquired-count" // every return, from RabbitMQ 4.0
)

// validateMessage adds AMQP's limits to Message.Validate. The routing key and header
// names are short strings of at most 255 bytes; amqp091-go cannot encode a longer one
// and closes the whole connection when it tries, so such a message is refused here.
func validateMessage(m idem.Message) error {
	if err := m.Validate(); err != nil {
		return err
	}
	if len(m.Topic) > maxShortStr {
		return tooLong("Message.Topic", m.Topic, "AMQP routing keys are at most 255 bytes: shorten the routing key")
	}
	for k := range m.Headers {
		if len(k) > maxShortStr {
			return &idem.InputError{Field: "Message.Headers", Reason: fmt.Sprintf("has a name longer than %d bytes (%d bytes, starting %.32q)", maxShortStr, len(k), k),
				Fix: "AMQP header names are at most 255 bytes: shorten the header name"}
		}
	}
	return nil
}

// publishing maps a message to AMQP: the ID as the message-id property, the headers
// as the headers table, and persistent delivery so a durable queue keeps it across
// a broker restart.
func publishing(m idem.Message) amqp.Publishing {
	var h amqp.Table
	if len(m.Headers) > 0 {
		h = make(amqp.Table, len(m.Headers))
		for k, v := range m.Headers {
			h[k] = v
		}
	}
	return amqp.Publishing{MessageId: m.ID, Headers: h, DeliveryMode: amqp.Persistent, Body: m.Payload}
}

// toDelivery maps an AMQP delivery to idem's. The ID comes from the message-id property
// or, for messages published by other producers that way, the idem.HeaderID header;
// a message with neither is delivered with an empty ID for the inbox to dead-letter.
func toDelivery(d amqp.Delivery, position string, quorum bool, settler idem.Settler) idem.Delivery {
	id := d.MessageId
	var headers map[string]string
	for k, v := range d.Headers {
		switch k {
		case idem.HeaderID:
			if id == "" {
				id = headerString(v)
			}
			continue
		case headerDeliveryCount, headerAcquiredCount:
			continue
		}
		if headers == nil {
			headers = make(map[string]string, len(d.Headers))
		}
		headers[k] = headerString(v)
	}
	return idem.Delivery{
		Message:  idem.Message{ID: id, Topic: d.RoutingKey, Headers: headers, Payload: d.Body},
		Attempt:  attempt(d, quorum),
		Position: position,
		Settler:  settler,
	}
}

// attempt is the broker's count of deliveries of d, 1 on the first: a quorum queue's
// count of earlier returns plus one. RabbitMQ 4.0 stopped counting returns that are
// not failures (a closed channel, basic.nack) in x-delivery-count and counts them in
// x-acquired-count instead, so the larger of the two is taken; a delivery the broker
// flags as redelivered is at least the second. Classic queues do not count: 0.
func attempt(d amqp.Delivery, quorum bool) int {
	if !quorum {
		return 0
	}
	// A count from another publisher may be anything: a negative one is no return,
	// and a huge one must not wrap around to a negative attempt.
	n := min(max(headerInt(d.Headers[headerDeliveryCount]), headerInt(d.Headers[headerAcquiredCount]), 0), math.MaxInt32)
	a := n + 1
	if d.Redelivered && a < 2 {
		a = 2
	}
	return a
}

// headerInt reads a count header, which the broker sends as a signed integer.
func headerInt(v any) int {
	switch v.(type) {
	case int64, int32, int16, int8, int:
		return int(reflect.ValueOf(v).Int())
	case uint32, uint16, byte:
		return int(reflect.ValueOf(v).Uint())
	}
	return 0
}

// headerString renders an AMQP header value as the string idem headers carry. Other
// producers may send numbers, booleans, tables or timestamps; they are formatted, not
// dropped.
func headerString(v any) string {
	switch s := v.(type) {
	case string:
		return s
	case []byte:
		return string(s)
	case nil:
		return ""
	case time.Time:
		return s.UTC().Format(time.RFC3339)
	}
	return fmt.Sprint(v)
}
