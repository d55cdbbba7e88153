package idempubsub

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/idemhq/idem"
)

// backend names Pub/Sub in every *idem.BackendError of this package.
const backend = "pubsub"

// googPrefix starts the attribute keys Pub/Sub reserves for itself (and its client
// libraries, such as googclient_traceparent).
const googPrefix = "goog"

// toPubSub checks m against idem's and Pub/Sub's limits and turns it into the
// message the sink publishes: attribute idem.HeaderID = m.ID, the headers as
// attributes, m.OrderingKey as the ordering key.
func toPubSub(m idem.Message) (*pubsubpb.PubsubMessage, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if err := validateName("Message.Topic", m.Topic, "topics", "a topic ID such as \"orders\""); err != nil {
		return nil, err
	}
	if len(m.ID) > maxAttrValueLen { // idem.MaxKeyLen is lower today; kept in case it grows
		return nil, &idem.InputError{Field: "Message.ID", Reason: fmt.Sprintf("is longer than %d bytes (got %d)", maxAttrValueLen, len(m.ID)),
			Fix: "Pub/Sub attribute values are at most 1024 bytes: shorten the ID"}
	}
	switch {
	case len(m.OrderingKey) > maxOrderingKey:
		return nil, &idem.InputError{Field: "Message.OrderingKey", Reason: fmt.Sprintf("is longer than %d bytes (got %d)", maxOrderingKey, len(m.OrderingKey)),
			Fix: "shorten it, or hash it: Pub/Sub ordering keys are at most 1024 bytes"}
	case !utf8.ValidString(m.OrderingKey):
		return nil, &idem.InputError{Field: "Message.OrderingKey", Reason: "is not valid UTF-8", Fix: "encode it as hex or base64"}
	case len(m.Headers)+1 > maxAttributes:
		return nil, &idem.InputError{Field: "Message.Headers", Reason: fmt.Sprintf("has %d headers; with the ID attribute that is more than Pub/Sub's %d attributes", len(m.Headers), maxAttributes),
			Fix: fmt.Sprintf("send at most %d headers, or move data into the payload", maxAttributes-1)}
	}
	attrs := make(map[string]string, len(m.Headers)+1)
	for k, v := range m.Headers {
		if err := validateAttribute(k, v); err != nil {
			return nil, err
		}
		attrs[k] = v
	}
	attrs[idem.HeaderID] = m.ID
	return &pubsubpb.PubsubMessage{Data: m.Payload, Attributes: attrs, OrderingKey: m.OrderingKey}, nil
}

// validateAttribute refuses a header Pub/Sub would refuse as an attribute (the whole
// request would fail), or that would be read back as something else.
func validateAttribute(k, v string) error {
	field := fmt.Sprintf("Message.Headers[%q]", k)
	switch {
	case k == "":
		return &idem.InputError{Field: "Message.Headers", Reason: "has an empty header name", Fix: "name every header"}
	case len(k) > maxAttrKeyLen:
		return &idem.InputError{Field: "Message.Headers", Reason: fmt.Sprintf("has a name longer than %d bytes (%d bytes, starting %.32q)", maxAttrKeyLen, len(k), k),
			Fix: "Pub/Sub attribute keys are at most 256 bytes: shorten the header name"}
	case len(v) > maxAttrValueLen:
		return &idem.InputError{Field: field, Reason: fmt.Sprintf("has a value longer than %d bytes (got %d)", maxAttrValueLen, len(v)),
			Fix: "Pub/Sub attribute values are at most 1024 bytes: move the value into the payload"}
	case !utf8.ValidString(k) || !utf8.ValidString(v):
		return &idem.InputError{Field: field, Reason: "is not valid UTF-8", Fix: "encode binary header values as base64"}
	case strings.HasPrefix(strings.ToLower(k), googPrefix):
		return &idem.InputError{Field: field, Reason: "starts with \"goog\", which Pub/Sub reserves", Fix: "rename the header"}
	case strings.EqualFold(k, idem.HeaderID):
		return &idem.InputError{Field: field, Reason: "duplicates Message.ID", Fix: "drop it: the sink carries Message.ID in that attribute"}
	}
	return nil
}

// size estimates the bytes pm takes in a Publish request.
func size(pm *pubsubpb.PubsubMessage) int {
	n := len(pm.Data) + len(pm.OrderingKey) + 16
	for k, v := range pm.Attributes {
		n += len(k) + len(v) + 8
	}
	return n
}

// fromPubSub turns a received message into an idem.Message. The ID is the
// idem.HeaderID attribute; a message published without one (by another tool) is
// delivered with an empty ID, which the inbox dead-letters, never dropped.
// Pub/Sub's own attributes ("goog…") are left out. topic is the subscription's.
func fromPubSub(pm *pubsubpb.PubsubMessage, topic string) idem.Message {
	m := idem.Message{Topic: topic, OrderingKey: pm.GetOrderingKey(), Payload: pm.GetData()}
	for k, v := range pm.GetAttributes() {
		switch {
		case k == idem.HeaderID:
			m.ID = v
		case strings.HasPrefix(strings.ToLower(k), googPrefix):
		default:
			if m.Headers == nil {
				m.Headers = make(map[string]string, len(pm.Attributes))
			}
			m.Headers[k] = v
		}
	}
	return m
}
