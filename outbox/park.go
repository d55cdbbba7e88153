package outbox

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
)

// MaxParkReasonBytes bounds the reason ParkTx records; a longer one is cut.
const MaxParkReasonBytes = 4096

// Unpublishable is a message a relay read and cannot publish, as ParkTx records it.
type Unpublishable struct {
	// Row is the message's row in idem_outbox; 0 for a message that has none (a
	// logical decoding message written by pgcdc.EmitTx).
	Row int64
	// Message is what could be read of it; a field that could not be read is empty.
	Message idem.Message
	// RawHeaders, when not empty, is stored as the headers instead of
	// Message.Headers: the text that failed to decode, kept as it was written.
	RawHeaders string
	// Reason says why it cannot be published, and where it was read; it becomes
	// the parked message's LastError.
	Reason string
}

// ParkTx records u as a parked message, in the caller's transaction q on dialect d
// (with the statements of d's registered driver: see idemsql.DriverFor), for an
// operator to act on: Admin.Parked lists it with its reason, Discard gives up on
// it, and Retry puts it back in line as a new row. The log-based relay
// (idempg/pgcdc) parks what it cannot publish with it; it reads the table's inserts
// only, which is why Retry re-inserts what ParkTx parked rather than clearing its
// parked_at (the row's id is recorded in idem_outbox_cdc_parked).
//
// The row u.Row is parked where it is, its attempts counted (again, if it was
// parked already: the reason is then replaced). A message without a row, or whose
// row was deleted or published, gets a new row, parked at once; the relay that
// parks it must then skip inserts that arrive parked.
func ParkTx(ctx context.Context, d idemsql.Dialect, q idemsql.Querier, u Unpublishable, now time.Time) error {
	drv, err := idemsql.DriverFor(d)
	if err != nil {
		return err
	}
	s := drv.Outbox()
	at := now.UnixMilli()
	reason := text(u.Reason)
	if len(reason) > MaxParkReasonBytes {
		reason = strings.ToValidUTF8(reason[:MaxParkReasonBytes], "")
	}
	id := u.Row
	var n int64
	if id != 0 {
		if n, err = q.Exec(ctx, s.Park, at, reason, id); err != nil {
			return err
		}
	}
	if n == 0 {
		if id, err = insertParked(ctx, s, q, u, reason, at); err != nil {
			return err
		}
	}
	_, err = q.Exec(ctx, s.MarkCDCParked, id)
	return err
}

// insertParked writes u as a new row, parked at, and returns its id. Text columns
// cannot hold NUL bytes or invalid UTF-8 (on PostgreSQL), which a message decoded
// from elsewhere may have: they are replaced, as nothing would publish them anyway.
func insertParked(ctx context.Context, s *idemsql.OutboxSQL, q idemsql.Querier, u Unpublishable, reason string, at int64) (int64, error) {
	m := u.Message
	headers := u.RawHeaders
	if headers == "" {
		b, err := json.Marshal(m.Headers)
		if err != nil || m.Headers == nil {
			b = []byte("{}")
		}
		headers = string(b)
	}
	args := []any{text(m.ID), text(m.Topic), text(m.OrderingKey), partition(m), text(headers), m.Payload, at, reason}
	if m.Payload == nil {
		args[5] = []byte{}
	}
	var id int64
	if s.LastInsertID != "" {
		if _, err := q.Exec(ctx, s.InsertParked, args...); err != nil {
			return 0, err
		}
		return id, q.QueryRow(ctx, s.LastInsertID).Scan(&id)
	}
	return id, q.QueryRow(ctx, s.InsertParked, args...).Scan(&id)
}

// text makes s storable in a text column.
func text(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// reinsert puts parked message id back in line as a new row, a copy of it that the
// log-based relay reads as any insert, and deletes the parked row.
func reinsert(ctx context.Context, s *idemsql.OutboxSQL, q idemsql.Querier, id, at int64) error {
	if _, err := q.Exec(ctx, s.Reinsert, at, id); err != nil {
		return err
	}
	if _, err := q.Exec(ctx, s.DeleteRow, id); err != nil {
		return err
	}
	_, err := q.Exec(ctx, s.UnmarkCDCParked, id)
	return err
}
