package outbox

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/rowscan"
)

// The relay reads rows that services in other languages write by hand ("The table,
// for services in other languages" in the package doc), so it decodes each row on
// its own. A row it cannot decode — headers that are not a JSON object of strings, a
// msg_id or topic that Message.Validate refuses, a part out of [0, Partitions), a
// value of another type than its column's (SQLite keeps whatever it is given) or
// one too large to read — is a failed publication of that message alone: its error
// is recorded, an attempt counted, and it is parked after RelayConfig.MaxAttempts,
// while the rows around it are published. A round never fails on a row's content.
//
// The size of each variable-length column is checked in the query, before its
// value is read (idemsql.OutboxSQL says what a claim returns): a row holding a
// gigabyte of headers costs the relay its length, not its bytes.
const (
	maxTextBytes    = idemsql.OutboxMaxTextBytes    // msg_id, topic, ordering_key
	maxHeadersBytes = idemsql.OutboxMaxHeadersBytes // headers
)

// claimColumns names a claim's columns in the problems rowscan reports.
var claimColumns = []string{"id", "attempts", "created_at", "part", "msg_id", "octet_length(msg_id)", "topic",
	"octet_length(topic)", "ordering_key", "octet_length(ordering_key)", "headers", "octet_length(headers)",
	"payload", "octet_length(payload)"}

// rawRow is a row as a claim reads it. A bounded column is nil when its value
// is longer than its bound (or NULL).
type rawRow struct {
	id, created, part                                  int64
	attempts                                           int
	msgID, topic, key, headers                         *string
	payload                                            *[]byte
	msgIDLen, topicLen, keyLen, headersLen, payloadLen int64
}

// scanRow reads the current row of rs and decodes it. A value of another type than
// its column's does not fail the read (rowscan reads the others): the row fails to
// decode. The error is the driver's, when the row cannot be read at all.
func scanRow(rs idemsql.Rows) (row, error) {
	var r rawRow
	bad, err := rowscan.Scan(rs, claimColumns, &r.id, &r.attempts, &r.created, &r.part, &r.msgID, &r.msgIDLen,
		&r.topic, &r.topicLen, &r.key, &r.keyLen, &r.headers, &r.headersLen, &r.payload, &r.payloadLen)
	if err != nil {
		return row{}, err
	}
	return decodeRow(&r, bad), nil
}

// decodeRow turns r into a row; bad is rowscan's account of the values that were
// not of their column's type, "" when all were. When the row cannot be published
// as written, its bad is set, naming the row, the column and the fix; its ordering
// key is kept when it could be read, so the failure holds back the later messages
// of its key.
func decodeRow(r *rawRow, bad string) row {
	w := row{id: r.id, attempts: r.attempts, created: r.created}
	w.bad = rowError(r.id, decodeColumns(r, bad, &w.msg))
	return w
}

// decodeColumns fills m from r, and returns the first error.
func decodeColumns(r *rawRow, bad string, m *idem.Message) error {
	var err error
	if m.OrderingKey, err = bounded("ordering_key", r.key, r.keyLen, maxTextBytes); err != nil {
		return err
	}
	if bad != "" {
		return &idem.InputError{Field: "row", Reason: "holds a value of another type than its column's (" + bad + ")",
			Fix: "write integers in part, attempts and the times (Unix milliseconds), text or bytes in the others (idem relay --schema)"}
	}
	if m.ID, err = bounded("msg_id", r.msgID, r.msgIDLen, maxTextBytes); err != nil {
		return err
	}
	if m.Topic, err = bounded("topic", r.topic, r.topicLen, maxTextBytes); err != nil {
		return err
	}
	headers, err := bounded("headers", r.headers, r.headersLen, maxHeadersBytes)
	if err != nil {
		return err
	}
	if m.Headers, err = decodeHeaders(headers); err != nil {
		return err
	}
	if r.payload == nil {
		return tooLong("payload", r.payloadLen, idem.MaxPayload)
	}
	if m.Payload = *r.payload; m.Payload == nil {
		m.Payload = []byte{}
	}
	if err := m.Validate(); err != nil {
		return asColumn(err)
	}
	if r.part < 0 || r.part >= Partitions {
		return &idem.InputError{Field: "part", Reason: fmt.Sprintf("is %d, outside 0 to %d", r.part, Partitions-1),
			Fix: "write fnv32a(ordering_key, or msg_id when it is '') mod 64, computed on unsigned 32-bit integers (idem relay --schema)"}
	}
	return nil
}

// bounded is the value of a bounded column of a claim, v, or the error of one too
// long to read (n its length).
func bounded(name string, v *string, n int64, max int) (string, error) {
	if v == nil {
		return "", tooLong(name, n, max)
	}
	return *v, nil
}

// tooLong is the error of a bounded column a claim did not read: longer than max bytes
// (n), or NULL (NOT NULL columns: not reached).
func tooLong(name string, n int64, max int) error {
	if n <= int64(max) {
		return &idem.InputError{Field: name, Reason: "is NULL", Fix: "write a value (idem relay --schema)"}
	}
	fix := "shorten it"
	if name == "payload" {
		fix = "store large bodies elsewhere and send a reference (claim-check pattern)"
	}
	return &idem.InputError{Field: name, Reason: fmt.Sprintf("is longer than %d bytes (got %d)", max, n), Fix: fix}
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
