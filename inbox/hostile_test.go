package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/inbox"
)

// TestHostileTextIsDeadLettered: a handler's error text and a producer's message id,
// topic and headers are text idem did not write. PostgreSQL refuses a NUL byte or
// invalid UTF-8 in a text column and MariaDB refuses invalid UTF-8 and text longer
// than its column, so a dead letter holding them verbatim could never be written:
// the message would come back for ever, and in a batch hold the others back. Each
// must be dead-lettered with its text made storable, and the good messages applied.
func TestHostileTextIsDeadLettered(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, b bundle) {
		for _, batch := range []int{1, 8} {
			fb := newFakeBroker()
			huge := strings.Repeat("downstream said: ", 10_000) // 170 kB
			h := func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
				switch m.ID {
				case "order-00002":
					return inbox.Permanent(errors.New("refused \x00 with \xff\xfe bytes: " + huge))
				case "order-00003":
					return errors.New("transient \x00\xff " + huge)
				}
				return credit(ctx, tx, m)
			}
			c := newConsumer(t, b, fb, h, inbox.Config{Consumer: fmt.Sprintf("hostile-%d", batch), BatchSize: batch, MaxAttempts: 2})
			badID := idem.Message{ID: "id\x00with-nul\xff", Topic: "orders\xff\x00", Payload: []byte(`{"Amount":1}`),
				Headers: map[string]string{"h\x00": "v\xff"}}
			longID := idem.Message{ID: strings.Repeat("x", 5000), Topic: "orders", Payload: []byte(`{"Amount":1}`)}
			fb.Publish(context.Background(), order(1), order(2), order(3), badID, longID, order(4))
			drain(t, c, fb)

			var n int
			if err := b.db.QueryRow("SELECT COUNT(*) FROM ledger WHERE msg_id IN ('order-00001', 'order-00004')").Scan(&n); err != nil || n != 2 {
				t.Fatalf("batch %d: good orders applied %d times (%v), want 2", batch, n, err)
			}
			dls, err := c.DeadLetters(context.Background(), 10)
			if err != nil {
				t.Fatal(err)
			}
			byID, got := map[string]inbox.DeadLetter{}, []string{}
			for _, dl := range dls {
				byID[dl.Message.ID] = dl
				got = append(got, fmt.Sprintf("%.40q (%s)", dl.Message.ID, dl.Kind))
				if !utf8.ValidString(dl.Reason) || len(dl.Reason) > 16<<10 {
					t.Errorf("batch %d: dead letter %d's reason (%d bytes) is not fitted", batch, dl.ID, len(dl.Reason))
				}
			}
			quoted := `"id\x00with-nul\xff"`
			var long inbox.DeadLetter
			for id, dl := range byID {
				if strings.HasPrefix(id, "xxxx") {
					long = dl
				}
			}
			if len(dls) != 4 || byID["order-00002"].Kind != "permanent" || byID["order-00003"].Kind != "max_attempts" ||
				byID[quoted].Kind != "no_key" || long.Kind != "no_key" || len(long.Message.ID) > 1024 {
				t.Fatalf("batch %d: dead letters %v; want order-00002 (permanent), order-00003 (max_attempts), "+
					"%s and the long id cut to 1 kB (no_key)", batch, got, quoted)
			}
			if r := byID["order-00002"].Reason; !strings.Contains(r, "refused \uFFFD with") {
				t.Errorf("batch %d: permanent reason is %.60q, want the handler's text with its refused bytes replaced", batch, r)
			}
			if _, err := b.db.Exec("DELETE FROM ledger"); err != nil {
				t.Fatal(err)
			}
			if _, err := b.db.Exec("DELETE FROM idem_dead_letters"); err != nil {
				t.Fatal(err)
			}
		}
	})
}
