//go:build unix

package console_test

import (
	"context"
	"database/sql"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/admin/console"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/queue"
)

// TestBrowserQueue: the console's queue panel, over a real queue on SQLite,
// shows the topics by state and the unfinished messages; Cancel asks for a
// reason and cancels the message (audited), which leaves the list; with the
// read token the Cancel buttons are disabled.
func TestBrowserQueue(t *testing.T) {
	needChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := idemsqlite.Open(ctx, filepath.Join(t.TempDir(), "queue.db"), idemsqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	db, err := idemsql.SQLDB(ctx, s.DB())
	if err != nil {
		t.Fatal(err)
	}
	q, err := queue.New(ctx, db, queue.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.InTx(ctx, func(tx *sql.Tx) error {
		_, err := q.InsertTx(ctx, tx,
			queue.Job{Message: idem.Message{ID: "o-1", Topic: "orders"}},
			queue.Job{Message: idem.Message{ID: "o-2", Topic: "orders", OrderingKey: "cust-7"}},
			queue.Job{Message: idem.Message{ID: "<img src=x onerror=alert(1)>", Topic: "mail"}, RunAt: time.Now().Add(time.Hour)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	src, err := q.Source(queue.SourceConfig{Topic: "orders", Worker: "worker-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if ds, err := src.Receive(ctx, 1); err != nil || len(ds) != 1 || ds[0].ID != "o-1" {
		t.Fatalf("claim %v, %v", ds, err)
	}

	var logs syncBuffer
	h, err := admin.New(admin.Config{Token: fullToken, ReadToken: readToken, Queue: admin.QueueFrom(q), Console: console.Handler(),
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	ui := openUI(ctx, t, hs.URL, &logs)
	ui.signIn(fullToken, "alice")

	orders := `#queue-topics tr[data-id="orders"]`
	ui.waitTrue("the orders topic", `!!document.querySelector('`+orders+`')`)
	ui.wantText(orders+` td:nth-child(2)`, "1")                          // ready
	ui.wantText(orders+` td:nth-child(3)`, "1")                          // running
	ui.wantText(`#queue-topics tr[data-id="mail"] td:nth-child(5)`, "1") // scheduled
	ui.wantText(`#queue-count`, "3")
	ui.wantTrue("the hostile id shown as text", `[...document.querySelectorAll('#queue-messages td')].some(td => td.textContent === '<img src=x onerror=alert(1)>')
		&& !document.querySelector('#queue-messages img')`)
	running := `#queue-messages tbody tr:first-child`
	ui.wantText(running+` td:nth-child(3)`, "o-1")
	ui.wantText(running+` td:nth-child(5)`, "running")
	ui.wantText(running+` td:nth-child(8)`, "worker-1")

	ui.run(`document.querySelector('` + running + ` button[data-action="cancel"]').click()`)
	ui.waitTrue("the dialog", `document.getElementById('confirm').open`)
	ui.run(`document.getElementById('confirm-reason').value = 'customer withdrew'; document.getElementById('confirm-form').requestSubmit()`)
	ui.waitTrue("the cancel logged", `idemConsole.actions.some(a => a.ok && a.text === 'cancel queue message o-1: cancelled')`)
	ui.waitTrue("o-1 gone from the list", `document.querySelector('#queue-count').textContent === '2'`)
	wantAudit(t, &logs, "POST /api/queue/cancel", "customer withdrew")
	fin, err := q.Finished(ctx, "orders", 0, 0)
	if err != nil || len(fin) != 1 || fin[0].MessageID != "o-1" || fin[0].Outcome != "cancelled" || fin[0].LastError != "customer withdrew" {
		t.Fatalf("finished %+v, %v", fin, err)
	}
	ui.wantTrue("no policy violation", `idemConsole.violations.length === 0`)

	ui.run(`document.getElementById('signout').click()`)
	ui.waitTrue("the token form again", `!document.getElementById('login').hidden`)
	ui.signIn(readToken, "bob")
	ui.waitTrue("the messages", `document.querySelectorAll('#queue-messages button[data-action="cancel"]').length === 2`)
	ui.wantTrue("cancel disabled for the read token", `[...document.querySelectorAll('#queue-messages button[data-action="cancel"]')].every(b => b.disabled)`)
}
