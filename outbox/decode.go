package outbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/idemhq/idem"
)

// The relay reads rows that services in other languages write by hand ("The table,
// for services in other languages" in the package doc), so it decodes each row on
// its own. A row it cannot decode — headers that are not a JSON object of strings, a
// msg_id or topic that Message.Validate refuses, a part out of [0, Partitions), a
// value of the wrong type (SQLite keeps whatever it is given) or one too large to
// read — is a failed publication of that message alone: its error is recorded, an
// attempt counted, and it is parked after RelayConfig.MaxAttempts, while the rows
// around it are published. A round never fails on a row's content.
//
// The size of each variable-length column is checked in the query, before its
// value is read: a row holding a gigabyte of headers costs the relay its length,
// not its bytes.
const (
	maxTextBytes    = 64 << 10 // msg_id, topic, ordering_key
	maxHeadersBytes = 1 << 20  // headers
)

// boundedCol selects column c of o when it is at most max bytes long (NULL
// otherwise), then its length. octet_length counts bytes on PostgreSQL, MySQL,
// MariaDB and SQLite alike.
func boundedCol(c string, max int) string {
	return fmt.Sprintf("CASE WHEN octet_length(o.%[1]s) <= %[2]d THEN o.%[1]s END, octet_length(o.%[1]s)", c, max)
}

// selectCols reads a row for decodeRow, in rawRow's order.
var selectCols = "SELECT o.id, o.attempts, o.created_at, o.part, " + boundedCol("msg_id", maxTextBytes) + ", " +
	boundedCol("topic", maxTextBytes) + ", " + boundedCol("ordering_key", maxTextBytes) + ", " +
	boundedCol("headers", maxHeadersBytes) + ", " + boundedCol("payload", idem.MaxPayload) + " "

// rawRow is a row as selectCols reads it: every column but id scanned into an any,
// which no value makes fail, so one row's content cannot fail the read of the
// others. A value is what the driver returns: int64, int32, float64, string, []byte
// or nil.
type rawRow struct {
	id                               int64
	attempts, created, part          any
	msgID, msgIDLen, topic, topicLen any
	key, keyLen, headers, headersLen any
	payload, payloadLen              any
}

// dest returns the scan destinations of r, in selectCols' order.
func (r *rawRow) dest() []any {
	return []any{&r.id, &r.attempts, &r.created, &r.part, &r.msgID, &r.msgIDLen, &r.topic, &r.topicLen,
		&r.key, &r.keyLen, &r.headers, &r.headersLen, &r.payload, &r.payloadLen}
}

// decodeRow turns r into a row. When a column cannot be decoded, the row's bad is
// set, naming the row, the column and the fix; its ordering key and attempts are
// kept when they could be read, so the failure is recorded on the row and holds
// back the later messages of its key.
func decodeRow(r *rawRow) row {
	w := row{id: r.id}
	w.bad = rowError(r.id, decodeColumns(r, &w))
	return w
}

// decodeColumns fills w from r, column by column, and returns the first error.
func decodeColumns(r *rawRow, w *row) error {
	m := &w.msg
	var err error
	if m.OrderingKey, err = textCol("ordering_key", r.key, r.keyLen, maxTextBytes); err != nil {
		return err
	}
	attempts, err := intCol("attempts", r.attempts)
	if err != nil {
		return err
	}
	w.attempts = int(attempts)
	if w.created, err = intCol("created_at", r.created); err != nil {
		return err
	}
	part, err := intCol("part", r.part)
	if err != nil {
		return err
	}
	if m.ID, err = textCol("msg_id", r.msgID, r.msgIDLen, maxTextBytes); err != nil {
		return err
	}
	if m.Topic, err = textCol("topic", r.topic, r.topicLen, maxTextBytes); err != nil {
		return err
	}
	headers, err := textCol("headers", r.headers, r.headersLen, maxHeadersBytes)
	if err != nil {
		return err
	}
	if m.Headers, err = decodeHeaders(headers); err != nil {
		return err
	}
	if m.Payload, err = bytesCol(r.payload, r.payloadLen); err != nil {
		return err
	}
	if err := m.Validate(); err != nil {
		return asColumn(err)
	}
	if part < 0 || part >= Partitions {
		return &idem.InputError{Field: "part", Reason: fmt.Sprintf("is %d, outside 0 to %d", part, Partitions-1),
			Fix: "write fnv32a(ordering_key, or msg_id when it is '') mod 64, computed on unsigned 32-bit integers (idem relay --schema)"}
	}
	return nil
}

// decodeHeaders decodes the headers column: a JSON object of strings, or "", "{}"
// or "null" for none.
func decodeHeaders(s string) (map[string]string, error) {
	if s == "" || s == "null" || s == "{}" { // most messages: no headers to decode
		return nil, nil
	}
	var h map[string]string
	if err := json.Unmarshal([]byte(s), &h); err != nil {
		return nil, &idem.InputError{Field: "headers", Reason: "is not a JSON object of strings (" + err.Error() + ")",
			Fix: `write {"name":"value",…} with string values, or '{}' for none (idem relay --schema)`}
	}
	return h, nil
}

// rowError says which row err is about; nil stays nil.
func rowError(id int64, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("outbox row %d: %w", id, err)
}

// asColumn renames the Message field of Validate's error to the column it was
// read from.
func asColumn(err error) error {
	var in *idem.InputError
	if !errors.As(err, &in) {
		return err
	}
	c := *in
	switch c.Field {
	case "Message.ID":
		c.Field = "msg_id"
	case "Message.Topic":
		c.Field = "topic"
	case "Message.Payload":
		c.Field = "payload"
	}
	return &c
}

// textCol decodes a text column read by boundedCol: v its value, n its length.
func textCol(name string, v, n any, max int) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case []byte:
		return string(v), nil
	case int64, int32, float64: // SQLite: a number written to a TEXT column stays one
		return fmt.Sprint(v), nil
	case nil:
		return "", nullOrLong(name, n, max)
	}
	return "", wrongType(name, v)
}

// bytesCol decodes the payload column read by boundedCol.
func bytesCol(v, n any) ([]byte, error) {
	switch v := v.(type) {
	case []byte:
		if v == nil {
			return []byte{}, nil
		}
		return v, nil
	case string:
		return []byte(v), nil
	case int64, int32, float64:
		return fmt.Append(nil, v), nil
	case nil:
		return nil, nullOrLong("payload", n, idem.MaxPayload)
	}
	return nil, wrongType("payload", v)
}

// nullOrLong is the error of a column boundedCol read as NULL: too long, or NULL.
func nullOrLong(name string, n any, max int) error {
	if l, err := intCol(name, n); err == nil && l > int64(max) {
		fix := "shorten it"
		if name == "payload" {
			fix = "store large bodies elsewhere and send a reference (claim-check pattern)"
		}
		return &idem.InputError{Field: name, Reason: fmt.Sprintf("is longer than %d bytes (got %d)", max, l), Fix: fix}
	}
	return &idem.InputError{Field: name, Reason: "is NULL", Fix: "write a value (idem relay --schema)"}
}

// intCol decodes an integer column.
func intCol(name string, v any) (int64, error) {
	switch v := v.(type) {
	case int64:
		return v, nil
	case int32:
		return int64(v), nil
	case float64: // SQLite keeps a REAL written to an INTEGER column
		if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
			return int64(v), nil
		}
	case []byte: // MySQL's text protocol
		if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return n, nil
		}
	case string:
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n, nil
		}
	case nil:
		return 0, &idem.InputError{Field: name, Reason: "is NULL", Fix: "write an integer (idem relay --schema)"}
	}
	return 0, wrongType(name, v)
}

func wrongType(name string, v any) error {
	s := fmt.Sprint(v)
	if b, ok := v.([]byte); ok {
		s = string(b)
	}
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return &idem.InputError{Field: name, Reason: fmt.Sprintf("holds %q (%T), not the type the contract says", s, v),
		Fix: "write the column's type: integers for part, attempts and the times (Unix milliseconds), text or bytes for the rest (idem relay --schema)"}
}
