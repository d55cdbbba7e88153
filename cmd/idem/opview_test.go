package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"reflect"
	"regexp"
	"testing"
	"time"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/admin/view"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/migrate"
)

// The JSON documents of the operator commands are the operator view's: the tests
// decode them by these names.
type (
	deadLetter = view.DeadLetterView
	keyRecord  = view.KeyRecord
	parkedJSON = view.ParkedView
	preview    = view.Preview
	sagaJSON   = view.Saga
	effectJSON = view.EffectView
)

// One stored payload shows the same on every surface: the admin API's JSON (which
// the console puts into its page as text), `idem dlq show --json` and the table of
// `idem dlq list` all render view.NewPreview. The payload is valid UTF-8 holding an
// escape sequence: the CLI once previewed it as "text" where the API showed hex,
// and a "text" preview is now always printable.
func TestOnePreviewForEverySurface(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t, "sqlite")
	ctx := context.Background()
	if err := migrate.Up(ctx, d.db, migrate.Inbox); err != nil {
		t.Fatal(err)
	}
	payload := []byte("slot\x1b[7m reserved")
	err := d.db.InTx(ctx, func(tx *sql.Tx) error {
		_, err := d.db.Querier(tx).Exec(ctx, `INSERT INTO idem_dead_letters (consumer, msg_id, topic, position, headers, payload,
			kind, reason, attempts, first_at, dead_at) VALUES ('billing', 'm-1', 'billing.v1', '', '{}', $1, 'permanent', 'r', 1, $2, $2)`,
			payload, time.Now().UnixMilli())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := view.NewPreview(payload, false)
	if want.Encoding != "hex" || want.Preview != fmt.Sprintf("%x", payload) {
		t.Fatalf("the preview of printable-but-for-ESC bytes is %+v, want hex", want)
	}

	var cli deadLetter
	decode(t, mustRun(t, "dlq", "show", "--db", d.url, "--id", "1", "--json"), &cli)
	if !reflect.DeepEqual(cli.Payload, want) {
		t.Errorf("idem dlq show --json: payload %+v, want %+v", cli.Payload, want)
	}
	if out := mustRun(t, "dlq", "show", "--db", d.url, "--id", "1"); !regexp.MustCompile(`(?m)^payload +`+regexp.QuoteMeta(want.Text())+`$`).MatchString(out) ||
		want.Text() != fmt.Sprintf("hex:%x (%d bytes)", payload, len(payload)) {
		t.Errorf("idem dlq show: the payload row is not %q:\n%s", want.Text(), out)
	}

	h, err := admin.New(admin.Config{Insecure: true, DeadLetters: admin.DeadLettersFrom(inbox.NewDeadLetterAdmin(d.db))})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1/api/deadletters/1", nil))
	var api struct{ Payload view.Preview }
	if err := json.Unmarshal(rec.Body.Bytes(), &api); err != nil || rec.Code != 200 {
		t.Fatalf("GET /api/deadletters/1: %d %s", rec.Code, rec.Body)
	}
	if !reflect.DeepEqual(api.Payload, want) {
		t.Errorf("admin API: payload %+v, want %+v", api.Payload, want)
	}
}
