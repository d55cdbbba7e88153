//go:build unix

package console_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/admin/console"
	"github.com/idemhq/idem/effect/saga"
	"github.com/idemhq/idem/internal/sqltest"
)

// TestBrowserParkedSagas loads the console in headless Chromium over a SQLite
// database where another service wrote a saga whose results are not a JSON object
// (the orchestrator parked it) and an effect with text in its token. The sagas
// needing attention list the parked saga, marked parked, with the reason the
// orchestrator gave, its retry enabled (for once the row is corrected); the
// effects table lists the bad effect, marked, saying why.
func TestBrowserParkedSagas(t *testing.T) {
	needChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db := sqltest.SQLite(t)
	noop := func(context.Context, saga.Input) ([]byte, error) { return nil, nil }
	o, err := saga.New(ctx, db, saga.Config{Logger: slog.New(slog.DiscardHandler)}, saga.Definition{Name: "order", Steps: []saga.Step{
		{Name: "reserve", Action: noop, NoCompensation: true}, {Name: "charge", Action: noop, NoCompensation: true}}})
	if err != nil {
		t.Fatal(err)
	}
	sqltest.Saga(t, db, "s-failed", "failed", `{}`, 1)
	sqltest.Saga(t, db, "s-parked", "running", `not json`, 0)
	if _, err := o.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	sqltest.Effect(t, db, "e-good", "charge", 1)
	sqltest.Effect(t, db, "e-bad", "charge", "seven")

	var logs syncBuffer
	cfg := admin.Config{Token: fullToken, Console: console.Handler(), Logger: slog.New(slog.NewJSONHandler(&logs, nil))}
	if skipped, err := admin.ForSQL(ctx, db, &cfg); err != nil || skipped["sagas"] != nil || skipped["effects"] != nil {
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

	for _, area := range []string{"sagas", "effects"} {
		ui.wantTrue(area+" loaded", `document.querySelector('#area-`+area+` .note').hidden`)
	}
	parked, failed := `#sagas tr[data-id="s-parked"]`, `#sagas tr[data-id="s-failed"]`
	ui.wantTrue("the parked saga marked parked", `document.querySelector('`+parked+` .parked-mark').textContent.trim() === 'parked' &&
		document.querySelector('`+parked+` td:nth-child(3)').textContent.startsWith('running')`)
	ui.wantTrue("its reason", `document.querySelector('`+parked+` td.reason').textContent.includes('its row cannot be decoded: results: not a JSON object')`)
	ui.wantTrue("its retry enabled", `!document.querySelector('`+parked+` button[data-action="retry"]').disabled`)
	ui.wantTrue("the failed saga listed, not marked", `!!document.querySelector('`+failed+`') && !document.querySelector('`+failed+` .parked-mark')`)
	ui.wantTrue("the bad effect marked", `(tr => tr.classList.contains('undecodable') &&
		tr.querySelector('.decode-error').textContent.startsWith('cannot be decoded: token: '))(document.querySelector('#effects tr[data-id="e-bad"]'))`)
	ui.wantTrue("the good effect not marked", `!document.querySelector('#effects tr[data-id="e-good"]').classList.contains('undecodable')`)
	ui.screenshot("parked")
	ui.wantTrue("no policy violation", `idemConsole.violations.length === 0`)
}
