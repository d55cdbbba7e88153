package pgcdc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkey"
)

// EmitPrefix is the prefix of the logical decoding messages EmitTx writes and the
// relay reads.
const EmitPrefix = "idem_outbox"

// MaxEmitBytes bounds one emitted message's encoding (payload, headers and names).
const MaxEmitBytes = idem.MaxPayload + 1<<20

// emitted is the encoding of one message in the WAL.
type emitted struct {
	ID      string            `json:"id"`
	Topic   string            `json:"topic"`
	Key     string            `json:"key,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Payload []byte            `json:"payload"`
}

// Execer runs a statement in the caller's transaction: idemsql.Querier, from
// idemsql.TxDB.Querier(tx) (idempg for pgx.Tx, idemsql.SQLDB for *sql.Tx).
type Execer interface {
	Exec(ctx context.Context, query string, args ...any) (int64, error)
}

// EmitTx writes msgs into the WAL only, as transactional logical decoding messages
// (pg_logical_emit_message), in the caller's transaction q: no outbox row, no index,
// no cleanup, no table bloat. A relay with Config.Messages on (`idem relay --cdc
// --cdc-messages`) publishes them, in commit order and interleaved with outbox rows
// in statement order, if and only if the transaction commits; a relay without it
// does not. Unlike outbox.EnqueueTx they are invisible to SQL (no Admin, no `idem
// outbox` listing) until the relay parks one it cannot publish, and exist only for
// a CDC relay: nothing else can publish them. The role of q needs EXECUTE on
// pg_logical_emit_message and INSERT on the outbox (see Config.Messages). A message
// without an ID gets a UUIDv7; the IDs are returned in order.
func EmitTx(ctx context.Context, q Execer, msgs ...idem.Message) ([]string, error) {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		if m.ID == "" {
			m.ID = idemkey.NewV7()
		}
		if err := m.Validate(); err != nil {
			return nil, fmt.Errorf("message %d of %d: %w", i+1, len(msgs), err)
		}
		b, err := json.Marshal(emitted{ID: m.ID, Topic: m.Topic, Key: m.OrderingKey, Headers: m.Headers, Payload: m.Payload})
		if err != nil {
			return nil, err
		}
		if len(b) > MaxEmitBytes {
			return nil, &idem.InputError{Field: "Message.Headers", Reason: fmt.Sprintf("message %d encodes to %d bytes, more than %d", i+1, len(b), MaxEmitBytes),
				Fix: "keep headers small"}
		}
		if _, err := q.Exec(ctx, "SELECT pg_logical_emit_message(true, '"+EmitPrefix+"', $1::bytea)", b); err != nil {
			return nil, &idem.BackendError{Backend: "postgres", Op: "cdc.emit", Err: err}
		}
		ids[i] = m.ID
	}
	return ids, nil
}

// decodeEmitted reads a message EmitTx wrote. One that is not EmitTx's encoding
// comes back with the WAL message as its payload (its first MaxEmitBytes), for the
// parked record.
func decodeEmitted(b []byte) (idem.Message, error) {
	if len(b) > MaxEmitBytes {
		return idem.Message{Payload: bytes.Clone(b[:MaxEmitBytes])},
			fmt.Errorf("emitted message of %d bytes, more than %d (the parked payload holds its first %d bytes)", len(b), MaxEmitBytes, MaxEmitBytes)
	}
	var e emitted
	if err := json.Unmarshal(b, &e); err != nil {
		return idem.Message{Payload: bytes.Clone(b)}, fmt.Errorf("emitted message is not idem's encoding (the parked payload holds it as written): %w", err)
	}
	m := idem.Message{ID: e.ID, Topic: e.Topic, OrderingKey: e.Key, Headers: e.Headers, Payload: e.Payload}
	return m, m.Validate()
}
