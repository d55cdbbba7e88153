package idempubsub

import (
	"bytes"
	"errors"
	"maps"
	"strings"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/idemhq/idem"
)

// FuzzAttributes checks the mapping between idem messages and Pub/Sub messages: a
// message the sink accepts comes back from the source unchanged and within Pub/Sub's
// limits; attributes from any publisher never panic the source, never leak
// Pub/Sub's own ("goog…") attributes or the ID attribute into the headers, and a
// missing or bad ID is an input error (which the inbox dead-letters), not a crash.
func FuzzAttributes(f *testing.F) {
	f.Add("order-1", "orders", "k", "Trace-Id", "abc", "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", []byte(`{}`))
	f.Add("", "orders", "", idem.HeaderID, "from-attr", "googclient_traceparent", "x", []byte{})
	f.Add("k", "projects/p/topics/abc", "\xff", "", "", "x", "\x00\xff", []byte(nil))
	f.Add("bad\x01", "goog-x", strings.Repeat("o", 1025), strings.Repeat("h", 257), "v", "Idem-Msg-Id", "dup", []byte("x"))
	f.Fuzz(func(t *testing.T, id, topic, key, k1, v1, k2, v2 string, payload []byte) {
		m := idem.Message{ID: id, Topic: topic, OrderingKey: key, Payload: payload, Headers: map[string]string{k1: v1, k2: v2}}
		pm, err := toPubSub(m)
		if err == nil {
			if len(pm.Attributes) > maxAttributes || len(pm.OrderingKey) > maxOrderingKey {
				t.Fatalf("accepted a message beyond Pub/Sub's limits: %d attributes, ordering key of %d bytes", len(pm.Attributes), len(pm.OrderingKey))
			}
			for k, v := range pm.Attributes {
				if len(k) > maxAttrKeyLen || len(v) > maxAttrValueLen || k == "" {
					t.Fatalf("accepted an attribute beyond Pub/Sub's limits: %d-byte key, %d-byte value", len(k), len(v))
				}
			}
			got := fromPubSub(pm, m.Topic)
			if got.ID != m.ID || got.Topic != m.Topic || got.OrderingKey != m.OrderingKey || !bytes.Equal(got.Payload, m.Payload) ||
				!maps.Equal(got.Headers, m.Headers) {
				t.Fatalf("round trip changed the message:\n sent %+v\n  got %+v", m, got)
			}
		} else if !errors.Is(err, idem.ErrInvalid) {
			t.Fatalf("toPubSub(%+v) = %v, want an *idem.InputError", m, err)
		}

		// Any attributes another publisher may send.
		raw := &pubsubpb.PubsubMessage{Data: payload, OrderingKey: key, Attributes: map[string]string{k1: v1, k2: v2, idem.HeaderID: id}}
		got := fromPubSub(raw, topic)
		if got.ID != id {
			t.Fatalf("ID %q, want the %s attribute %q", got.ID, idem.HeaderID, id)
		}
		for k := range got.Headers {
			if k == idem.HeaderID || strings.HasPrefix(strings.ToLower(k), googPrefix) {
				t.Fatalf("attribute %q was delivered as a header: %+v", k, got.Headers)
			}
		}
		if err := got.Validate(); err != nil && !errors.Is(err, idem.ErrInvalid) {
			t.Fatalf("Validate = %v, want nil or an *idem.InputError", err)
		}
	})
}
