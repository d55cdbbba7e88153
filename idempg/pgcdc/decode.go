package pgcdc

import (
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/jackc/pglogrepl"

	"github.com/idemhq/idem"
)

// relation is the outbox table as pgoutput describes it: where its columns are.
type relation struct {
	id, topic, key, headers, payload int
	n                                int
}

func newRelation(m *pglogrepl.RelationMessage) (*relation, error) {
	r := &relation{id: -1, topic: -1, key: -1, headers: -1, payload: -1, n: len(m.Columns)}
	for i, c := range m.Columns {
		switch c.Name {
		case "msg_id":
			r.id = i
		case "topic":
			r.topic = i
		case "ordering_key":
			r.key = i
		case "headers":
			r.headers = i
		case "payload":
			r.payload = i
		}
	}
	if r.id < 0 || r.topic < 0 || r.key < 0 || r.headers < 0 || r.payload < 0 {
		return nil, fmt.Errorf("table %s.%s lacks the outbox's columns msg_id, topic, ordering_key, headers, payload", m.Namespace, m.RelationName)
	}
	return r, nil
}

// message decodes an inserted outbox row (pgoutput sends text format).
func (r *relation) message(t *pglogrepl.TupleData) (idem.Message, error) {
	if t == nil {
		return idem.Message{}, fmt.Errorf("insert without a row")
	}
	if len(t.Columns) != r.n {
		return idem.Message{}, fmt.Errorf("row has %d columns, the relation %d", len(t.Columns), r.n)
	}
	text := func(i int) (string, error) {
		c := t.Columns[i]
		if c.DataType != pglogrepl.TupleDataTypeText {
			return "", fmt.Errorf("column %d is %q, not text", i, c.DataType)
		}
		return string(c.Data), nil
	}
	var m idem.Message
	var err error
	var headers, payload string
	for _, f := range []struct {
		i   int
		dst *string
	}{{r.id, &m.ID}, {r.topic, &m.Topic}, {r.key, &m.OrderingKey}, {r.headers, &headers}, {r.payload, &payload}} {
		if *f.dst, err = text(f.i); err != nil {
			return m, err
		}
	}
	if headers != "" && headers != "{}" {
		if err := json.Unmarshal([]byte(headers), &m.Headers); err != nil {
			return m, fmt.Errorf("headers are not a JSON object of strings: %w", err)
		}
	}
	if len(payload) < 2 || payload[:2] != `\x` {
		return m, fmt.Errorf("payload is not bytea hex output")
	}
	if m.Payload, err = hex.DecodeString(payload[2:]); err != nil {
		return m, fmt.Errorf("payload: %w", err)
	}
	return m, m.Validate()
}

// parse decodes a pgoutput message; pglogrepl indexes without bounds checks, so a
// truncated message is an error here rather than a panic.
func parse(data []byte) (m pglogrepl.Message, err error) {
	defer func() {
		if p := recover(); p != nil {
			m, err = nil, fmt.Errorf("malformed pgoutput message (%d bytes): %v", len(data), p)
		}
	}()
	return pglogrepl.Parse(data)
}
