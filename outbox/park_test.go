package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/outbox"
)

// What the log-based relay parks (ParkTx) is listed with its reason, can be
// discarded, and is retried as a new row (that relay reads inserts only), on every
// dialect.
func TestParkTxAndRetryAsNewRow(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		a := outbox.NewAdmin(e.tx)
		park := func(u outbox.Unpublishable) {
			t.Helper()
			if err := e.tx.InTx(ctx, func(tx *sql.Tx) error {
				return outbox.ParkTx(ctx, e.tx.Dialect(), e.tx.Querier(tx), u, time.Now())
			}); err != nil {
				t.Fatal(err)
			}
		}
		rowID := func(msgID string) (id int64) {
			t.Helper()
			if err := e.db.QueryRowContext(ctx, "SELECT MAX(id) FROM idem_outbox WHERE msg_id = $1", msgID).Scan(&id); err != nil {
				t.Fatal(err)
			}
			return id
		}
		enqueue(t, e, idem.Message{ID: "row-1", Topic: "orders", Headers: map[string]string{"h": "v"}, Payload: []byte("p1")})
		row := rowID("row-1")
		park(outbox.Unpublishable{Row: row, Message: idem.Message{ID: "row-1"}, Reason: "cdc: the sink refused it"})
		park(outbox.Unpublishable{Row: row, Reason: "cdc: the sink refused it again"}) // a relay reading it twice
		// A WAL message has no row; what it holds is kept, made storable.
		park(outbox.Unpublishable{Message: idem.Message{ID: "emitted\x00-1", Topic: "orders", Headers: map[string]string{"a": "b"},
			Payload: []byte{0, 1}}, Reason: strings.Repeat("é", outbox.MaxParkReasonBytes)})
		parked, err := a.Parked(ctx, 0, 10)
		if err != nil || len(parked) != 2 {
			t.Fatalf("Parked = %+v, %v; want row-1 and the WAL message", parked, err)
		}
		p1, p2 := parked[0], parked[1]
		if p1.ID != row || p1.LastError != "cdc: the sink refused it again" || p1.Attempts != 2 || p1.Message.Headers["h"] != "v" {
			t.Fatalf("the parked row = %+v", p1)
		}
		if p2.Message.ID != "emitted\uFFFD-1" || p2.Message.Headers["a"] != "b" || string(p2.Message.Payload) != "\x00\x01" ||
			len(p2.LastError) > outbox.MaxParkReasonBytes || !utf8.ValidString(p2.LastError) {
			t.Fatalf("the parked WAL message = %+v (reason %d bytes)", p2.Message, len(p2.LastError))
		}
		// A row that is gone by the time it is parked (CDC users delete rows on their
		// own schedule) is written again, parked, with its headers as they were.
		park(outbox.Unpublishable{Row: row + 1000, Message: idem.Message{ID: "gone", Topic: "orders"}, RawHeaders: `{"n":1}`, Reason: "cdc: headers"})
		var headers string
		if err := e.db.QueryRowContext(ctx, "SELECT headers FROM idem_outbox WHERE msg_id = 'gone' AND parked_at IS NOT NULL").Scan(&headers); err != nil || headers != `{"n":1}` {
			t.Fatalf("the parked copy of a deleted row: headers %q, %v", headers, err)
		}

		if err := a.Discard(ctx, p2.ID, "a forged message"); err != nil {
			t.Fatal(err)
		}
		if err := a.Retry(ctx, p2.ID); !errors.Is(err, outbox.ErrNotParked) {
			t.Fatalf("Retry of a discarded message = %v, want ErrNotParked", err)
		}
		if err := a.Retry(ctx, row); err != nil {
			t.Fatal(err)
		}
		if err := a.Retry(ctx, row); !errors.Is(err, outbox.ErrNotParked) {
			t.Fatalf("second Retry = %v, want ErrNotParked: the row went back in line as a new one", err)
		}
		again := rowID("row-1")
		var attempts int
		var payload []byte
		var parkedAt *int64
		if err := e.db.QueryRowContext(ctx, "SELECT attempts, payload, parked_at, headers FROM idem_outbox WHERE id = $1", again).
			Scan(&attempts, &payload, &parkedAt, &headers); err != nil {
			t.Fatal(err)
		}
		if again <= row || attempts != 0 || parkedAt != nil || string(payload) != "p1" || !strings.Contains(headers, `"h":"v"`) {
			t.Fatalf("row-1 after Retry: id %d (was %d), attempts %d, parked_at %v, payload %q, headers %s; want a new pending row",
				again, row, attempts, parkedAt, payload, headers)
		}
		var n int
		e.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM idem_outbox WHERE id = $1", row).Scan(&n)
		if n != 0 {
			t.Fatal("the parked row is still there after Retry")
		}
	})
}
