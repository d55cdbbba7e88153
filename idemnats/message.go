package idemnats

import (
	"fmt"
	"strings"

	"github.com/idemhq/idem"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// backend names NATS in every *idem.BackendError of this package.
const backend = "nats"

// natsPrefix starts the headers NATS reserves for itself: Nats-Msg-Id, and the
// directives (Nats-Expected-Last-Sequence, Nats-Rollup, Nats-TTL…) that would change
// what the server does with a message.
const natsPrefix = "nats-"

// toNATS checks m and turns it into the message the sink publishes: subject
// m.Topic, header Nats-Msg-Id = m.ID plus m.Headers. maxPayload is the server's
// limit on payload plus headers (0 when unknown).
func toNATS(m idem.Message, maxPayload int64) (*nats.Msg, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if err := validatePublishSubject(m.Topic); err != nil {
		return nil, err
	}
	if trimmed(m.ID) {
		// Nats-Msg-Id " a" would arrive as "a": JetStream would drop the message as a
		// duplicate of message "a".
		return nil, &idem.InputError{Field: "Message.ID", Reason: fmt.Sprintf("starts or ends with a space (got %q), which NATS headers drop", m.ID),
			Fix: "trim the ID where it is made, or encode it: NATS would deduplicate it with the trimmed ID"}
	}
	h := make(nats.Header, len(m.Headers)+1)
	size := len(jetstream.MsgIDHeader) + len(m.ID) + 4
	for k, v := range m.Headers {
		if err := validateHeader(k, v, len(m.Payload)); err != nil {
			return nil, err
		}
		h.Set(k, v)
		size += len(k) + len(v) + 4
	}
	h.Set(jetstream.MsgIDHeader, m.ID)
	if maxPayload > 0 && int64(len(m.Payload)+size+16) > maxPayload {
		return nil, &idem.InputError{Field: "Message.Payload",
			Reason: fmt.Sprintf("with its headers is larger than the server's max_payload of %d bytes (got %d + %d)", maxPayload, len(m.Payload), size+16),
			Fix:    "raise max_payload on the NATS server (up to 64 MiB; natsserver.StartServer sets 8 MiB plus room for headers), or send a reference to the body"}
	}
	return &nats.Msg{Subject: m.Topic, Header: h, Data: m.Payload}, nil
}

// validatePublishSubject checks a subject messages are published to: a subject
// filter's rules, without wildcards.
func validatePublishSubject(subject string) error {
	if err := validateSubject("Message.Topic", subject); err != nil {
		return err
	}
	for _, tok := range strings.Split(subject, ".") {
		if tok == "*" || tok == ">" {
			return &idem.InputError{Field: "Message.Topic", Reason: fmt.Sprintf("contains a wildcard (got %q)", subject),
				Fix: "publish to a concrete subject; wildcards belong in stream subjects and consumer filters"}
		}
	}
	return nil
}

// validateHeader refuses what would corrupt the NATS header block or be taken as
// a directive by the server or the client.
func validateHeader(k, v string, payloadLen int) error {
	field := fmt.Sprintf("Message.Headers[%q]", k)
	switch {
	case k == "":
		return &idem.InputError{Field: "Message.Headers", Reason: "has an empty header name", Fix: "name every header"}
	case strings.IndexFunc(k, func(r rune) bool { return r <= ' ' || r == ':' || r >= 0x7f }) >= 0:
		return &idem.InputError{Field: field, Reason: "has a space, colon, control or non-ASCII character in its name",
			Fix: "use header names like \"Content-Type\" or \"Trace-Id\""}
	case strings.ContainsAny(v, "\r\n"):
		return &idem.InputError{Field: field, Reason: "has a line break in its value", Fix: "encode the value on one line (for example base64)"}
	case trimmed(v):
		return &idem.InputError{Field: field, Reason: fmt.Sprintf("starts or ends with a space or tab (got %q), which NATS headers drop", v),
			Fix: "trim the value, or encode it (for example base64)"}
	case strings.HasPrefix(strings.ToLower(k), natsPrefix):
		return &idem.InputError{Field: field, Reason: "is reserved by NATS (Nats-* headers are server directives)",
			Fix: "rename the header; the sink sets Nats-Msg-Id from Message.ID itself"}
	case strings.EqualFold(k, idem.HeaderID):
		return &idem.InputError{Field: field, Reason: "duplicates Message.ID",
			Fix: "drop it: the sink carries Message.ID as Nats-Msg-Id"}
	case k == "Status" && payloadLen == 0:
		// nats.go takes a message with a Status header and no payload for a server
		// status message, and would swallow it on the consumer side.
		return &idem.InputError{Field: field, Reason: "on a message with an empty payload would be read as a NATS status message",
			Fix: "rename the header, or send a non-empty payload"}
	}
	return nil
}

// trimmed reports whether NATS would change v on the wire: the client trims the
// spaces and tabs around every header value (textproto.TrimString).
func trimmed(v string) bool {
	return v != "" && (isSpace(v[0]) || isSpace(v[len(v)-1]))
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' }

// fromNATS turns a received JetStream message into an idem.Message. The ID comes
// from Nats-Msg-Id, or from idem.HeaderID for messages published by other tools; a
// message with neither is delivered with an empty ID so the inbox dead-letters it.
// NATS's own headers are left out.
func fromNATS(msg jetstream.Msg) idem.Message {
	return fromParts(msg.Subject(), msg.Headers(), msg.Data())
}

// fromParts is fromNATS on the parts of a message.
func fromParts(subject string, hdr nats.Header, data []byte) idem.Message {
	m := idem.Message{Topic: subject, Payload: data}
	var fallbackID string
	for k, vs := range hdr {
		switch lk := strings.ToLower(k); {
		case len(vs) == 0 || strings.HasPrefix(lk, natsPrefix):
		case lk == strings.ToLower(idem.HeaderID):
			fallbackID = vs[0]
		default:
			if m.Headers == nil {
				m.Headers = make(map[string]string, len(hdr))
			}
			m.Headers[k] = vs[0]
		}
	}
	m.ID = hdr.Get(jetstream.MsgIDHeader)
	if m.ID == "" {
		m.ID = fallbackID
	}
	return m
}
