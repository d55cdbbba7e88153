package pgcdc

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/jackc/pglogrepl"

	"github.com/idemhq/idem"
)

// relation is the outbox table as pgoutput describes it: where its columns are.
type relation struct {
	id, msgID, topic, key, headers, payload, parked int
	n                                               int
}

func newRelation(m *pglogrepl.RelationMessage) (*relation, error) {
	r := &relation{id: -1, msgID: -1, topic: -1, key: -1, headers: -1, payload: -1, parked: -1, n: len(m.Columns)}
	for i, c := range m.Columns {
		switch c.Name {
		case "id":
			r.id = i
		case "msg_id":
			r.msgID = i
		case "topic":
			r.topic = i
		case "ordering_key":
			r.key = i
		case "headers":
			r.headers = i
		case "payload":
			r.payload = i
		case "parked_at":
			r.parked = i
		}
	}
	if min(r.id, r.msgID, r.topic, r.key, r.headers, r.payload, r.parked) < 0 {
		return nil, fmt.Errorf("table %s.%s lacks the outbox's columns id, msg_id, topic, ordering_key, headers, payload, parked_at", m.Namespace, m.RelationName)
	}
	return r, nil
}

// row is an inserted outbox row as the relay read it.
type row struct {
	id      int64 // 0 if it could not be read
	parked  bool  // inserted parked (by a relay parking a message): nothing to publish
	msg     idem.Message
	headers string // the headers column as written
}

// decode reads an inserted outbox row (pgoutput sends text format). On an error the
// row holds what could be read before it, for the parked record.
func (r *relation) decode(t *pglogrepl.TupleData) (row, error) {
	var w row
	if t == nil {
		return w, fmt.Errorf("insert without a row")
	}
	if len(t.Columns) != r.n {
		return w, fmt.Errorf("row has %d columns, the relation %d", len(t.Columns), r.n)
	}
	if t.Columns[r.parked].DataType == pglogrepl.TupleDataTypeText {
		w.parked = true
		return w, nil
	}
	text := func(i int, name string) (string, error) {
		c := t.Columns[i]
		if c.DataType != pglogrepl.TupleDataTypeText {
			return "", fmt.Errorf("column %s is %q, not text", name, c.DataType)
		}
		return string(c.Data), nil
	}
	id, err := text(r.id, "id")
	if err != nil {
		return w, err
	}
	if w.id, err = strconv.ParseInt(id, 10, 64); err != nil {
		return w, fmt.Errorf("column id: %w", err)
	}
	var payload string
	for _, f := range []struct {
		i    int
		name string
		dst  *string
	}{{r.msgID, "msg_id", &w.msg.ID}, {r.topic, "topic", &w.msg.Topic}, {r.key, "ordering_key", &w.msg.OrderingKey},
		{r.headers, "headers", &w.headers}, {r.payload, "payload", &payload}} {
		if *f.dst, err = text(f.i, f.name); err != nil {
			return w, err
		}
	}
	if len(payload) < 2 || payload[:2] != `\x` {
		return w, fmt.Errorf("payload is not bytea hex output")
	}
	if w.msg.Payload, err = hex.DecodeString(payload[2:]); err != nil {
		return w, fmt.Errorf("payload: %w", err)
	}
	if w.headers != "" && w.headers != "{}" {
		if err := json.Unmarshal([]byte(w.headers), &w.msg.Headers); err != nil {
			return w, fmt.Errorf("headers are not a JSON object of strings: %w", err)
		}
	}
	return w, w.msg.Validate()
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
