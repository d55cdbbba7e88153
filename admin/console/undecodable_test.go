//go:build unix

package console_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/admin/console"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/migrate"
)

// TestBrowserUndecodableRows loads the console in headless Chromium over a SQLite
// database where another service wrote rows by hand: a dead letter and a parked
// message whose headers are not a JSON object of strings, and a saga with text in
// its attempts column. Every table loads; the bad rows are listed with the
// others, marked, saying why; their replay and retry are disabled, and the bad
// dead letter is discarded through its button.
func TestBrowserUndecodableRows(t *testing.T) {
	needChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db := sqltest.SQLite(t)
	if err := migrate.Up(ctx, db, migrate.Inbox, migrate.Outbox, migrate.Effect, migrate.Saga); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	good := sqltest.DeadLetter(t, db, "dl-good", `{"tenant":"t-1"}`, now)
	bad := sqltest.DeadLetter(t, db, "dl-bad", `{"n":1}`, now)
	goodParked := sqltest.Parked(t, db, "m-good", `{}`, 3)
	badParked := sqltest.Parked(t, db, "m-bad", `not json`, 3)
	sqltest.Saga(t, db, "s-good", "failed", `{}`, 1)
	sqltest.Saga(t, db, "s-typed", "failed", `{}`, "twice")

	var logs syncBuffer
	cfg := admin.Config{Token: fullToken, Console: console.Handler(), Logger: slog.New(slog.NewJSONHandler(&logs, nil))}
	if skipped, err := admin.ForSQL(ctx, db, &cfg); err != nil || len(skipped) != 0 {
		t.Fatalf("ForSQL: skipped %v, %v", skipped, err)
	}
	h, err := admin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	ui := openUI(ctx, t, hs.URL, &logs)
	ui.signIn(fullToken, "alice")

	for _, area := range []string{"deadletters", "outbox", "sagas"} {
		ui.wantTrue(area+" loaded", `document.querySelector('#area-`+area+` .note').hidden`)
	}
	row := func(table string, id any) string { return fmt.Sprintf(`#%s tr[data-id="%v"]`, table, id) }
	for _, r := range []struct {
		good, bad, note, blocked string
	}{
		{row("deadletters", good), row("deadletters", bad), "cannot be decoded: headers: not a JSON object of strings", "replay"},
		{row("parked", goodParked), row("parked", badParked), "cannot be decoded: headers: not a JSON object of strings", "retry"},
		{row("sagas", "s-good"), row("sagas", "s-typed"), "cannot be decoded: attempts: ", "retry"},
	} {
		ui.wantTrue(r.good+" listed, not marked", `!!document.querySelector('`+r.good+`') &&
			!document.querySelector('`+r.good+`').classList.contains('undecodable') && !document.querySelector('`+r.good+` .decode-error')`)
		ui.wantTrue(r.bad+" listed and marked", `document.querySelector('`+r.bad+`').classList.contains('undecodable') &&
			document.querySelector('`+r.bad+` .decode-error').textContent.startsWith(`+jsString(r.note)+`)`)
		ui.wantTrue(r.bad+" "+r.blocked+" disabled, saying why", `(b => b.disabled && b.title.includes('cannot be decoded'))(
			document.querySelector('`+r.bad+` button[data-action="`+r.blocked+`"]'))`)
		ui.wantTrue(r.good+" "+r.blocked+" enabled", `!document.querySelector('`+r.good+` button[data-action="`+r.blocked+`"]').disabled`)
	}
	ui.screenshot("undecodable")

	ui.run(`document.querySelector('` + row("deadletters", bad) + ` button[data-action="discard"]').click()`)
	ui.waitTrue("the dialog", `document.getElementById('confirm').open`)
	ui.run(`document.getElementById('confirm-reason').value = 'headers written by hand'; document.getElementById('confirm-form').requestSubmit()`)
	ui.waitTrue("the discard", `idemConsole.actions.some(a => a.ok && a.text === 'discard dead letter `+fmt.Sprint(bad)+`: discarded')`)
	ui.waitTrue("the bad letter gone", `!document.querySelector('`+row("deadletters", bad)+`') && !!document.querySelector('`+row("deadletters", good)+`')`)
	ui.wantTrue("no policy violation", `idemConsole.violations.length === 0`)
}
