package idemredis

import (
	"encoding/json"
	"fmt"
	"maps"
	"unicode/utf8"

	"github.com/idemhq/idem"
	"github.com/redis/go-redis/v9"
)

// The fields of a stream entry written by StreamSink and read by StreamSource. They
// are the wire format for services in other languages, which produce or consume the
// same streams with plain XADD, XREADGROUP and XACK:
//
//		XADD orders * id order-17 payload '{"total":42}' headers '{"tenant":"a"}'
//
//	  - "id" is Message.ID, the idempotency key consumers deduplicate on. Every
//	    publish of the same logical message carries the same id.
//	  - "payload" is the body, bytes as they are (Redis strings are binary-safe).
//	  - "headers" is a JSON object of string to string values (Message.Headers). It is
//	    left out when there are no headers; one field rather than a field per header,
//	    so a header named "id" or "payload" cannot collide with the others.
//
// The stream key is Message.Topic and the entry id ("1718000000000-0") is Redis's, so
// Redis orders entries. A consumer ignores fields it does not know; it reads a
// missing "id" from the idem.HeaderID header, if a producer put it there.
const (
	StreamFieldID      = "id"
	StreamFieldPayload = "payload"
	StreamFieldHeaders = "headers"
)

// streamFeatures are what the Redis Streams adapter promises (see StreamSource for the
// reasons): Redis streams never deduplicate, one stream is read in entry id order,
// Nak waits its delay through the entry's idle time, and Redis counts deliveries.
func streamFeatures() idem.Features {
	return idem.Features{Dedup: false, OrderedPerKey: true, DelayedNak: true, Attempts: true}
}

// checkClient refuses a nil client with the same advice New gives.
func checkClient(client redis.UniversalClient) error {
	if client == nil {
		return &idem.InputError{Field: "client", Reason: "is nil",
			Fix: "pass a connected client, e.g. redis.NewClient(&redis.Options{Addr: \"localhost:6379\"})"}
	}
	return nil
}

// entryValues encodes m as the field/value pairs of a stream entry, in a fixed order.
func entryValues(m idem.Message) ([]any, error) {
	vals := make([]any, 0, 6)
	vals = append(vals, StreamFieldID, m.ID, StreamFieldPayload, m.Payload)
	h := m.Headers
	if _, ok := h[idem.HeaderID]; ok {
		// The id field carries the ID; a second copy in the headers could only disagree.
		h = maps.Clone(h)
		delete(h, idem.HeaderID)
	}
	for k, v := range h {
		// JSON replaces invalid UTF-8 with U+FFFD: the header would arrive changed.
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, &idem.InputError{Field: fmt.Sprintf("Message.Headers[%q]", k), Reason: "is not valid UTF-8",
				Fix: "headers travel as JSON in the stream entry: encode binary header values (for example base64)"}
		}
	}
	if len(h) > 0 {
		b, err := json.Marshal(h)
		if err != nil { // a map[string]string always marshals; keep the error honest anyway
			return nil, fmt.Errorf("encode headers of %s: %w", m.ID, err)
		}
		vals = append(vals, StreamFieldHeaders, b)
	}
	return vals, nil
}

// decodeEntry turns a stream entry into a message, with whatever the entry has: a
// missing field leaves its part of the message empty (an entry without an id gets
// ID "", which the inbox dead-letters) and never drops the entry. problem says what
// was wrong with a malformed headers field, for the log.
func decodeEntry(stream string, x redis.XMessage) (m idem.Message, problem string) {
	m.Topic = stream
	if v, ok := x.Values[StreamFieldID]; ok {
		m.ID = str(v)
	}
	if v, ok := x.Values[StreamFieldPayload]; ok {
		m.Payload = []byte(str(v))
	}
	if v, ok := x.Values[StreamFieldHeaders]; ok {
		if err := json.Unmarshal([]byte(str(v)), &m.Headers); err != nil {
			m.Headers = nil
			problem = fmt.Sprintf("the %q field is not a JSON object of strings (%v); delivered without headers", StreamFieldHeaders, err)
		}
	}
	if id, ok := m.Headers[idem.HeaderID]; ok {
		if _, hasField := x.Values[StreamFieldID]; !hasField {
			m.ID = id
		}
		delete(m.Headers, idem.HeaderID)
	}
	if len(m.Headers) == 0 {
		m.Headers = nil
	}
	return m, problem
}

// str is a field value as a string; go-redis reads every value of an entry as one.
func str(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}
