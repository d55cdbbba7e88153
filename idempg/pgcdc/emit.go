package pgcdc

import (
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

// Execer runs a statement in the caller's transaction: idem.Querier, from
// idem.TxDB.Querier(tx) (idempg for pgx.Tx, idem.SQLDB for *sql.Tx).
type Execer interface {
	Exec(ctx context.Context, query string, args ...any) (int64, error)
}

// EmitTx writes msgs into the WAL only, as transactional logical decoding messages
// (pg_logical_emit_message), in the caller's transaction q: no outbox row, no index,
// no cleanup, no table bloat. The relay publishes them, in commit order and
// interleaved with outbox rows in statement order, if and only if the transaction
// commits. Unlike outbox.EnqueueTx they are invisible to SQL (no Admin, no parking,
// no `idem outbox` listing) and exist only for a CDC relay: nothing else can publish
// them. A message without an ID gets a UUIDv7; the IDs are returned in order.
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

// decodeEmitted reads a message EmitTx wrote.
func decodeEmitted(b []byte) (idem.Message, error) {
	if len(b) > MaxEmitBytes {
		return idem.Message{}, fmt.Errorf("emitted message of %d bytes, more than %d", len(b), MaxEmitBytes)
	}
	var e emitted
	if err := json.Unmarshal(b, &e); err != nil {
		return idem.Message{}, fmt.Errorf("emitted message is not idem's encoding: %w", err)
	}
	m := idem.Message{ID: e.ID, Topic: e.Topic, OrderingKey: e.Key, Headers: e.Headers, Payload: e.Payload}
	return m, m.Validate()
}
