//go:build unix

package console_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/internal/sagatest"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/migrate"
)

// TestBrowserUndecodableRows loads the console in headless Chromium over a SQLite
// database where another service wrote rows by hand: a dead letter and a parked
// message whose headers are not a JSON object of strings, a saga with text in
// its attempts column, an effect with text in its token, and a saga whose results
// are not a JSON object (the orchestrator parked it). Every table loads; the bad
// rows are listed with the others, marked, saying why; their replay and retry are
// disabled, and the bad dead letter is discarded through its button. The parked
// saga is among the sagas needing attention, marked parked, with the reason the
// orchestrator gave, its retry enabled (for once the row is corrected).
func TestBrowserUndecodableRows(t *testing.T) {
	needChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db := sqltest.SQLite(t)
	if err := migrate.Up(ctx, db, migrate.Inbox, migrate.Outbox, migrate.Effect, migrate.Saga, migrate.Queue); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	good := sqltest.DeadLetter(t, db, "dl-good", `{"tenant":"t-1"}`, now)
	bad := sqltest.DeadLetter(t, db, "dl-bad", `{"n":1}`, now)
	goodParked := sqltest.Parked(t, db, "m-good", `{}`, 3)
	badParked := sqltest.Parked(t, db, "m-bad", `not json`, 3)
	sqltest.Saga(t, db, "s-good", "failed", `{}`, 1)
	sqltest.Saga(t, db, "s-typed", "failed", `{}`, "twice")
	sagatest.Park(t, db, "s-parked")
	sqltest.Effect(t, db, "e-good", "charge", 1)
	sqltest.Effect(t, db, "e-bad", "charge", "seven")

	ui, _ := openSQLConsole(ctx, t, db, admin.Config{})
	for _, area := range []string{"deadletters", "outbox", "sagas", "effects", "queue"} {
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
	ui.wantTrue("e-bad listed and marked", `(tr => tr.classList.contains('undecodable') &&
		tr.querySelector('.decode-error').textContent.startsWith('cannot be decoded: token: '))(document.querySelector('`+row("effects", "e-bad")+`'))`)
	ui.wantTrue("e-good listed, not marked", `!document.querySelector('`+row("effects", "e-good")+`').classList.contains('undecodable')`)
	parked := row("sagas", "s-parked")
	ui.wantTrue("s-parked marked parked", `document.querySelector('`+parked+` .parked-mark').textContent.trim() === 'parked' &&
		document.querySelector('`+parked+` td:nth-child(3)').textContent.startsWith('running') && !document.querySelector('`+row("sagas", "s-good")+` .parked-mark')`)
	ui.wantTrue("its reason", `document.querySelector('`+parked+` td.reason').textContent.includes('its row cannot be decoded: results: not a JSON object')`)
	ui.wantTrue("its retry enabled", `!document.querySelector('`+parked+` button[data-action="retry"]').disabled`)
	ui.screenshot("undecodable")

	ui.run(`document.querySelector('` + row("deadletters", bad) + ` button[data-action="discard"]').click()`)
	ui.waitTrue("the dialog", `document.getElementById('confirm').open`)
	ui.run(`document.getElementById('confirm-reason').value = 'headers written by hand'; document.getElementById('confirm-form').requestSubmit()`)
	ui.waitTrue("the discard", `idemConsole.actions.some(a => a.ok && a.text === 'discard dead letter `+fmt.Sprint(bad)+`: discarded')`)
	ui.waitTrue("the bad letter gone", `!document.querySelector('`+row("deadletters", bad)+`') && !!document.querySelector('`+row("deadletters", good)+`')`)
	ui.wantTrue("no policy violation", `idemConsole.violations.length === 0`)
}
