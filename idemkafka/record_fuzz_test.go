package idemkafka

import (
	"bytes"
	"errors"
	"maps"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemhq/idem"
)

// FuzzRecordHeaders checks the mapping between idem messages and Kafka records: a
// message the sink accepts comes back from the source unchanged (but for its
// idem.HeaderID header, which the ID replaces); headers from any producer never
// panic the source, and a missing or bad ID is an input error (which the inbox
// dead-letters), not a crash.
func FuzzRecordHeaders(f *testing.F) {
	f.Add("order-1", "orders", "ord-1", "Trace-Id", "abc", "Content-Type", "application/json", []byte(`{"n":1}`))
	f.Add("", "orders", "", idem.HeaderID, "from-header", idem.HeaderID, "second", []byte{})
	f.Add("k", "t", "", "", "", "x", "\x00\xff", []byte(nil))
	f.Fuzz(func(t *testing.T, id, topic, key, k1, v1, k2, v2 string, payload []byte) {
		m := idem.Message{ID: id, Topic: topic, OrderingKey: key, Payload: payload, Headers: map[string]string{k1: v1, k2: v2}}
		if err := m.Validate(); err == nil {
			got := fromRecord(toRecord(m))
			want := maps.Clone(m.Headers)
			delete(want, idem.HeaderID)
			if len(want) == 0 {
				want = nil
			}
			if got.ID != m.ID || got.Topic != m.Topic || got.OrderingKey != m.OrderingKey || !bytes.Equal(got.Payload, m.Payload) ||
				!maps.Equal(got.Headers, want) {
				t.Fatalf("round trip changed the message:\n sent %+v\n  got %+v", m, got)
			}
		} else if !errors.Is(err, idem.ErrInvalid) {
			t.Fatalf("Validate(%+v) = %v, want an *idem.InputError", m, err)
		}

		// Any headers another producer may send, repeated keys included.
		r := &kgo.Record{Topic: topic, Key: []byte(key), Value: payload, Headers: []kgo.RecordHeader{
			{Key: k1, Value: []byte(v1)}, {Key: k2, Value: []byte(v2)}, {Key: idem.HeaderID, Value: []byte(id)}}}
		got := fromRecord(r)
		if got.ID != id {
			t.Fatalf("ID %q, want the last %s header %q", got.ID, idem.HeaderID, id)
		}
		if _, ok := got.Headers[idem.HeaderID]; ok {
			t.Fatalf("the %s header was delivered as a header too: %+v", idem.HeaderID, got.Headers)
		}
		if err := got.Validate(); err != nil && !errors.Is(err, idem.ErrInvalid) {
			t.Fatalf("Validate = %v, want nil or an *idem.InputError", err)
		}
	})
}
