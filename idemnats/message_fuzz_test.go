package idemnats

import (
	"bytes"
	"errors"
	"maps"
	"net/textproto"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem"
)

// FuzzHeaders checks the mapping between idem messages and NATS headers: a message
// the sink accepts comes back from the source unchanged; headers from any publisher
// never panic the source, never leak NATS's own headers, and a missing or bad ID
// is an input error (which the inbox dead-letters), not a crash.
func FuzzHeaders(f *testing.F) {
	f.Add("order-1", "orders.created", "Trace-Id", "abc", "Content-Type", "application/json", []byte(`{"n":1}`))
	f.Add("", "orders", idem.HeaderID, "from-header", "Nats-Msg-Id", "", []byte{})
	f.Add("k", "orders", "nats-rollup", "all", "Status", "100", []byte(nil))
	f.Add(strings.Repeat("x", 300), "a.b", "idem-id", "y", "x:y", "line\nbreak", []byte("p"))
	f.Add("k", "orders.*", "Nats-Msg-Id", "other", "", "", []byte("p"))
	f.Add(" k", "orders", "Trace", " x\t", "A", "b ", []byte("p"))
	f.Fuzz(func(t *testing.T, id, topic, k1, v1, k2, v2 string, payload []byte) {
		m := idem.Message{ID: id, Topic: topic, Payload: payload, Headers: map[string]string{k1: v1, k2: v2}}
		if msg, err := toNATS(m, 0); err == nil {
			hdr, err := nats.DecodeHeadersMsg(wire(msg.Header))
			if err != nil {
				t.Fatalf("the header block of %+v does not decode: %v", m, err)
			}
			got := fromParts(msg.Subject, hdr, msg.Data)
			if got.ID != m.ID || got.Topic != m.Topic || !bytes.Equal(got.Payload, m.Payload) || !maps.Equal(got.Headers, m.Headers) {
				t.Fatalf("round trip changed the message:\n sent %+v\n  got %+v", m, got)
			}
		} else if !errors.Is(err, idem.ErrInvalid) {
			t.Fatalf("toNATS(%+v) = %v, want an *idem.InputError", m, err)
		}

		// Any headers another publisher may send.
		h := nats.Header{}
		h.Add(k1, v1)
		h.Add(k2, v2)
		if id != "" {
			h.Set(jetstream.MsgIDHeader, id)
		}
		got := fromParts(topic, h, payload)
		for k := range got.Headers {
			if strings.HasPrefix(strings.ToLower(k), natsPrefix) || strings.EqualFold(k, idem.HeaderID) {
				t.Fatalf("delivered NATS's or idem's own header %q: %+v", k, got.Headers)
			}
		}
		if id != "" && got.ID != id {
			t.Fatalf("ID %q, want the Nats-Msg-Id %q", got.ID, id)
		}
		if err := got.Validate(); err != nil && !errors.Is(err, idem.ErrInvalid) {
			t.Fatalf("Validate = %v, want nil or an *idem.InputError", err)
		}
	})
}

// wire encodes h as nats.go's client puts it on the wire (Msg.headerBytes): a
// "k: v" line per value, the value trimmed of ASCII spaces, CR and LF replaced.
func wire(h nats.Header) []byte {
	var b strings.Builder
	b.WriteString("NATS/1.0\r\n")
	for k, vs := range h {
		for _, v := range vs {
			b.WriteString(k + ": " + strings.NewReplacer("\r", " ", "\n", " ").Replace(textproto.TrimString(v)) + "\r\n")
		}
	}
	b.WriteString("\r\n")
	return []byte(b.String())
}
