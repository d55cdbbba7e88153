//go:build unix

package console_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/admin/console"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/cdp"
	"github.com/idemhq/idem/internal/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

const (
	fullToken = "full-token-0123456789abcdef"
	readToken = "read-token-0123456789abcdef"
	// xss is a dead letter's reason and payload: it must show as text.
	xss = `<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>`
	// xssKey is a key id an attacker chose.
	xssKey = `<b onmouseover="window.__xss=3">k</b>`
	// xssScope is a scope an attacker chose (behind serve: a tenant header).
	xssScope = `<i onmouseover="window.__xss=4">t</i>`
)

// TestBrowser loads the console in headless Chromium against the admin API over
// fakes of its areas (no store implements idem.Inspector yet) and a registry fed
// by a real idemmem store and idem's collectors; signs in, checks the tables and
// charts, replays a dead letter and evicts a stuck key through the page's buttons,
// and checks through the fakes and the audit log that both happened.
func TestBrowser(t *testing.T) {
	needChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	now := time.Now()
	ins := &fakeInspector{recs: map[idem.Key]idem.Record{}}
	for _, r := range []idem.Record{
		{Key: idem.Key{Scope: "orders", ID: "o-1"}, State: idem.StateCompleted, Token: 11, CreatedAt: now.Add(-time.Hour),
			ExpiresAt: now.Add(23 * time.Hour), Result: []byte(`{"status":"paid","receipt":"` + strings.Repeat("r", 80) + `","end":true}`)},
		{Key: idem.Key{Scope: "orders", ID: "o-2"}, State: idem.StateInProgress, Token: 12, CreatedAt: now.Add(-10 * time.Minute),
			ExpiresAt: now.Add(-5 * time.Minute)}, // stuck: in progress past its lease
		{Key: idem.Key{Scope: "orders", ID: "o-3"}, State: idem.StateInProgress, Token: 13, CreatedAt: now.Add(-time.Second),
			ExpiresAt: now.Add(time.Minute)},
		{Key: idem.Key{Scope: "orders", ID: xssKey}, State: idem.StateCompleted, Token: 14, CreatedAt: now, ExpiresAt: now.Add(time.Hour),
			Result: []byte(xss)},
		{Key: idem.Key{Scope: xssScope, ID: "t-1"}, State: idem.StateCompleted, Token: 15, CreatedAt: now, ExpiresAt: now.Add(time.Hour)},
		// A response idemhttp stored, with an attacker's markup in a header and the body.
		{Key: idem.Key{Scope: "orders", ID: "o-4"}, State: idem.StateCompleted, Token: 16, CreatedAt: now, ExpiresAt: now.Add(time.Hour),
			Result: storedResponse(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				w.Header().Set("X-Note", xss)
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, xss)
			})},
	} {
		ins.recs[r.Key] = r
	}
	dl := &fakeDeadLetters{dls: map[int64]admin.DeadLetter{
		1: {ID: 1, Consumer: "orders", Topic: "orders.v1", MessageID: "m-1", Kind: "permanent", Reason: "card declined",
			Attempts: 1, DeadAt: now.Add(-3 * time.Minute), Payload: []byte(`{"order":1}`)},
		2: {ID: 2, Consumer: "billing", Topic: "billing.v1", MessageID: "m-2", Kind: "max_attempts", Reason: xss,
			Attempts: 9, DeadAt: now.Add(-time.Minute), Payload: []byte(xss)},
	}}
	ob := &fakeOutbox{parked: map[int64]admin.ParkedMessage{
		7: {ID: 7, MessageID: "m-7", Topic: "shipments", Attempts: 10, LastError: "broker unreachable", ParkedAt: now.Add(-2 * time.Minute), Payload: []byte("hello")},
	}}
	sg := &fakeSagas{sagas: []admin.Saga{{ID: "s-1", Name: "checkout", State: "failed", Step: 2, Attempts: 3, Reason: "refund failed", UpdatedAt: now}}}

	// Metrics: a real store's claims, and idem's HTTP, inbox and relay collectors.
	reg := prometheus.NewRegistry()
	traffic := startTraffic(t, reg)

	var logs syncBuffer
	h, err := admin.New(admin.Config{
		Token: fullToken, ReadToken: readToken,
		Stores:      map[string]idem.Inspector{"main": ins},
		DeadLetters: dl, Outbox: ob, Sagas: sg, Effects: fakeEffects{}, Gatherer: reg,
		Console: console.Handler(),
		Logger:  slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	t.Cleanup(traffic)

	ui := openUI(ctx, t, hs.URL, &logs)

	// Without a token the page asks for one.
	ui.signIn(fullToken, "alice")
	ui.wantTrue("the token is in sessionStorage only", `sessionStorage.getItem('idem-admin-token') === `+jsString(fullToken)+
		` && localStorage.length === 0 && document.cookie === '' && document.getElementById('token').value === ''`)
	ui.wantTrue("full access shown", `document.getElementById('access').textContent === 'full access'`)

	// The tables.
	ui.wantText(`#deadletters tr[data-id="1"] td:nth-child(5)`, "card declined")
	ui.wantText(`#parked tr[data-id="7"] td:nth-child(5)`, "broker unreachable")
	// The relays: the live one plain, the dead one marked stale.
	ui.wantTrue("relay-b marked stale, relay-a not", `(() => {
		const rs = Array.from(document.querySelectorAll('#outbox-status .relay'));
		const a = rs.find(r => r.textContent.includes('relay-a')), b = rs.find(r => r.textContent.includes('relay-b'));
		return a && b && !a.classList.contains('stale') && !a.textContent.includes('STALE') &&
			b.classList.contains('stale') && b.querySelector('.stale-mark').textContent === 'STALE'; })()`)
	ui.wantText(`#sagas tr[data-id="s-1"] td:nth-child(6)`, "refund failed")
	ui.wantText(`#effects tr[data-id="charge/o-9"] td:nth-child(2)`, "failed")
	ui.wantText(`#area-stream .note`, "Not configured on this server.")

	// The attacker's reason and payload are text: no element was made from them, no
	// script ran, and the policy saw no violation.
	ui.wantText(`#deadletters tr[data-id="2"] td:nth-child(5)`, xss)
	ui.wantText(`#deadletters tr[data-id="2"] td:nth-child(8) code`, xss[:admin.PreviewBytes]+"…")
	ui.wantTrue("no element from the payload", `document.querySelectorAll('img, #main script, [onerror]').length === 0 && window.__xss === undefined`)

	// The store's scopes, offered next to the scope box as text; picking one lists
	// its keys.
	ui.waitTrue("the scope picker", `!document.getElementById('keys-scopes-label').hidden && document.querySelectorAll('#keys-scopes option').length === 3`)
	ui.wantText(`#keys-scopes option:nth-child(2)`, xssScope)
	ui.wantText(`#keys-scopes option:nth-child(3)`, "orders")
	ui.wantTrue("no element from the scope", `document.querySelectorAll('#keys-scopes i').length === 0 && window.__xss === undefined`)
	ui.run(`const s = document.getElementById('keys-scopes'); s.value = 'orders'; s.dispatchEvent(new Event('change'))`)
	ui.waitTrue("the picked scope's keys", `document.getElementById('keys-scope').value === 'orders' && document.querySelectorAll('#keys tr[data-id]').length === 5`)

	// Keys of a scope, the stuck one marked.
	ui.run(`document.getElementById('keys-scope').value = 'orders'; document.getElementById('keys-form').requestSubmit()`)
	ui.waitTrue("the keys", `document.querySelectorAll('#keys tr[data-id]').length === 5`)
	ui.wantText(`#keys tr[data-id="o-2"] td:nth-child(2)`, "stuck")
	// The stored response reads as one: status, content type, body; its markup is text.
	ui.wantText(`#keys tr[data-id="o-4"] td:nth-child(6) .http-status`, "201")
	ui.wantText(`#keys tr[data-id="o-4"] td:nth-child(6) .http-type`, "text/html")
	ui.wantText(`#keys tr[data-id="o-4"] td:nth-child(6) code.body`, xss[:admin.PreviewBytes]+"…")
	ui.wantText(`#keys tr[data-id="o-1"] td:nth-child(6) code`, string(ins.result("orders", "o-1")[:admin.PreviewBytes])+"…")
	ui.wantText(`#keys tbody tr:first-child td:first-child`, xssKey)
	ui.wantText(`#keys tbody tr:first-child td:nth-child(6) code`, xss[:admin.PreviewBytes]+"…")
	ui.wantTrue("no element from the key", `document.querySelectorAll('#keys b, #keys img, #keys script, [onmouseover]').length === 0`)
	ui.wantText(`#keys tr[data-id="o-3"] td:nth-child(2)`, "in progress")
	ui.run(`document.getElementById('keys-stuck').click()`)
	ui.waitTrue("stuck keys only", `Array.from(document.querySelectorAll('#keys tr[data-id]'), tr => tr.dataset.id).join() === 'o-2'`)
	ui.run(`document.getElementById('keys-stuck').click()`)
	ui.waitTrue("all keys again", `document.querySelectorAll('#keys tr[data-id]').length === 5`)

	// The charts, once a few polls of GET /api/metrics are in.
	ui.waitTrue("the charts", `idemConsole.polls >= 4 && ['claims', 'duplicates', 'replays', 'conflicts', 'deadletters', 'relay'].every(id => {
		const c = document.querySelector('[data-chart="' + id + '"]');
		return !c.classList.contains('absent') && c.querySelector('path.line').getAttribute('d').length > 0 &&
			Number.parseFloat(c.querySelector('.chart-value').textContent) > 0; })`)
	ui.wantTrue("an absent metric said so", `document.querySelector('[data-chart="oldest"] .chart-foot').textContent === 'idem_outbox_oldest_age_seconds not exported by this server'`)
	ui.screenshot("overview")

	// Replay dead letter 1 through its button and the reason dialog.
	ui.run(`document.querySelector('#deadletters tr[data-id="1"] button[data-action="replay"]').click()`)
	ui.waitTrue("the dialog", `document.getElementById('confirm').open`)
	ui.wantText(`#confirm-title`, "Replay dead letter 1")
	ui.run(`document.getElementById('confirm-reason').value = 'card network back'`)
	ui.screenshot("dialog")
	ui.run(`document.getElementById('confirm-form').requestSubmit()`)
	ui.waitTrue("the replay's outcome", `idemConsole.actions.some(a => a.ok && a.text === 'replay dead letter 1: replayed')`)
	ui.waitTrue("dead letter 1 gone", `!document.querySelector('#deadletters tr[data-id="1"]') && !!document.querySelector('#deadletters tr[data-id="2"]')`)
	if got := dl.replayedIDs(); !slices.Equal(got, []int64{1}) {
		t.Errorf("replayed %v, want [1]", got)
	}
	wantAudit(t, &logs, "POST /api/deadletters/replay", "card network back")

	// Evicting the live in-progress key without force is refused (409), and it stays.
	ui.run(`document.querySelector('#keys tr[data-id="o-3"] button[data-action="evict"]').click()`)
	ui.waitTrue("the dialog", `document.getElementById('confirm').open && !document.getElementById('confirm-force-row').hidden`)
	ui.run(`document.getElementById('confirm-reason').value = 'try'; document.getElementById('confirm-form').requestSubmit()`)
	ui.waitTrue("the refusal", `idemConsole.actions.some(a => !a.ok && a.text.startsWith('evict key orders/o-3:') && a.text.includes('set force'))`)
	// The stuck one, with force.
	ui.run(`document.querySelector('#keys tr[data-id="o-2"] button[data-action="evict"]').click()`)
	ui.waitTrue("the dialog", `document.getElementById('confirm').open`)
	ui.run(`document.getElementById('confirm-reason').value = 'holder died';
		document.getElementById('confirm-force').checked = true;
		document.getElementById('confirm-form').requestSubmit()`)
	ui.waitTrue("the eviction", `idemConsole.actions.some(a => a.ok && a.text === 'evict key orders/o-2: evicted')`)
	ui.waitTrue("o-2 gone", `!document.querySelector('#keys tr[data-id="o-2"]') && document.querySelectorAll('#keys tr[data-id]').length === 4`)
	if ins.has(idem.Key{Scope: "orders", ID: "o-2"}) || !ins.has(idem.Key{Scope: "orders", ID: "o-3"}) {
		t.Error("o-2 not evicted, or o-3 evicted")
	}
	wantAudit(t, &logs, "POST /api/keys/evict", "holder died")

	// Look up the stored response: its status, headers and body, as text.
	ui.run(`document.getElementById('key-scope').value = 'orders'; document.getElementById('key-id').value = 'o-4';
		document.getElementById('key-form').requestSubmit()`)
	ui.waitTrue("the response", `!!document.querySelector('#key-record ul.http-headers')`)
	ui.wantTrue("its headers listed as text", `Array.from(document.querySelectorAll('#key-record ul.http-headers li'), li => li.textContent).join('|') === `+
		jsString("Content-Type: text/html|X-Note: "+xss[:admin.PreviewBytes]+"…"))
	ui.wantTrue("no element from the response", `document.querySelectorAll('#key-record script, #key-record img, [onerror]').length === 0 && window.__xss === undefined`)
	ui.screenshot("stored-response")

	// Look up a key: a preview, and the whole result on demand.
	ui.run(`document.getElementById('key-scope').value = 'orders'; document.getElementById('key-id').value = 'o-1';
		document.getElementById('key-form').requestSubmit()`)
	ui.waitTrue("the record", `!!document.querySelector('#key-record dl') && !document.querySelector('#key-record pre')`)
	ui.wantText(`#key-record dd code.preview`, string(ins.result("orders", "o-1")[:admin.PreviewBytes])+"…")
	ui.run(`document.querySelector('#key-record button[data-action="full"]').click()`)
	ui.waitTrue("the whole result", `!!document.querySelector('#key-record pre.full')`)
	ui.wantText(`#key-record pre.full`, string(ins.result("orders", "o-1")))
	// And evict it from there.
	ui.run(`document.querySelector('#key-record button[data-action="evict"]').click()`)
	ui.waitTrue("the dialog", `document.getElementById('confirm').open`)
	ui.run(`document.getElementById('confirm-reason').value = 'customer asked'; document.getElementById('confirm-form').requestSubmit()`)
	ui.waitTrue("o-1 evicted", `document.getElementById('key-record').textContent === 'Evicted.' && !document.querySelector('#keys tr[data-id="o-1"]')`)
	if ins.has(idem.Key{Scope: "orders", ID: "o-1"}) {
		t.Error("o-1 not evicted")
	}
	ui.wantTrue("no policy violation, no script of the attacker's", `idemConsole.violations.length === 0 && window.__xss === undefined`)
	ui.screenshot("after-actions")

	// Retry the parked message, resolve the saga, discard the attacker's dead letter.
	for _, a := range []struct{ row, action, reason, outcome string }{
		{`#parked tr[data-id="7"]`, "retry", "broker is back", "retry parked message 7: retried"},
		{`#sagas tr[data-id="s-1"]`, "resolve", "refunded by hand", "resolve saga s-1: resolved"},
		{`#deadletters tr[data-id="2"]`, "discard", "spam", "discard dead letter 2: discarded"},
	} {
		ui.run(`document.querySelector('` + a.row + ` button[data-action="` + a.action + `"]').click()`)
		ui.waitTrue("the dialog", `document.getElementById('confirm').open`)
		ui.run(`document.getElementById('confirm-reason').value = ` + jsString(a.reason) + `;
			document.getElementById('confirm-form').requestSubmit()`)
		ui.waitTrue(a.outcome, `idemConsole.actions.some(a => a.ok && a.text === `+jsString(a.outcome)+`)`)
		ui.waitTrue(a.row+" gone", `!document.querySelector('`+a.row+`')`)
	}
	if len(ob.parkedIDs()) != 0 || sg.state("s-1") != "compensated" || dl.has(2) {
		t.Errorf("after the actions: parked %v, saga %s, dead letter 2 kept %v", ob.parkedIDs(), sg.state("s-1"), dl.has(2))
	}
	wantAudit(t, &logs, "POST /api/sagas/{id}/resolve", "refunded by hand")
	ui.wantText(`#deadletters tbody td`, "No dead letters.")

	// A cancelled dialog does nothing.
	ui.run(`document.querySelector('#keys tr[data-id="o-3"] button[data-action="evict"]').click()`)
	ui.waitTrue("the dialog", `document.getElementById('confirm').open`)
	ui.run(`document.getElementById('confirm-reason').value = 'no'; document.getElementById('confirm-force').checked = true;
		document.getElementById('confirm-cancel').click()`)
	ui.waitTrue("the dialog closed", `!document.getElementById('confirm').open`)
	if !ins.has(idem.Key{Scope: "orders", ID: "o-3"}) {
		t.Error("a cancelled eviction evicted")
	}

	// With the read token the actions are disabled.
	ui.run(`document.getElementById('signout').click()`)
	ui.waitTrue("the token form again", `!document.getElementById('login').hidden && sessionStorage.getItem('idem-admin-token') === null`)
	ui.run(`document.getElementById('token').value = ` + jsString(readToken) + `; document.getElementById('login-form').requestSubmit()`)
	ui.waitTrue("read-only console", `idemConsole.ready && idemConsole.access === 'read' &&
		!!document.querySelector('#keys-store option') && document.querySelectorAll('#main tbody tr').length > 0`)
	ui.run(`document.getElementById('keys-form').requestSubmit()`) // the scope is remembered for the tab
	ui.waitTrue("the keys", `document.querySelectorAll('#keys tr[data-id]').length === 3`)
	ui.wantTrue("buttons disabled", `document.querySelectorAll('#main button[data-action]').length >= 2 &&
		Array.from(document.querySelectorAll('#main button[data-action]')).every(b => b.disabled)`)
	ui.wantTrue("the old session's record is gone", `document.getElementById('key-record').childElementCount === 0`)
}

// TestBrowserWithoutToken: an Insecure admin API (loopback only) opens without
// asking for a token.
func TestBrowserWithoutToken(t *testing.T) {
	needChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := admin.New(admin.Config{Insecure: true, DeadLetters: &fakeDeadLetters{dls: map[int64]admin.DeadLetter{
		5: {ID: 5, Consumer: "orders", Kind: "permanent", Reason: "bad"}}},
		Console: console.Handler(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h) // 127.0.0.1: a loopback Host
	t.Cleanup(hs.Close)
	page := cdp.Start(t).NewPage(ctx, t)
	if err := page.Call(ctx, "Page.navigate", map[string]any{"url": hs.URL + "/"}, nil); err != nil {
		t.Fatal(err)
	}
	ui := &ui{t: t, ctx: ctx, page: page}
	ui.waitTrue("the console", `window.idemConsole.ready && !!document.querySelector('#deadletters tr[data-id="5"]')`)
	ui.wantText("#access", "no token (loopback)")
	ui.wantTrue("no token asked or kept", `document.getElementById('login').hidden && document.getElementById('signout').hidden &&
		sessionStorage.getItem('idem-admin-token') === null`)
	ui.wantText(`#rates-note`, "not configured on this server (admin.Config.Gatherer)")
	ui.wantText(`#area-keys .note`, "Not configured on this server.")
	ui.wantTrue("actions allowed", `!document.querySelector('#deadletters tr[data-id="5"] button[data-action="replay"]').disabled`)
}

// openUI opens the console at url in headless Chromium, in a window wide enough for
// its tables; when t fails, it logs the browser's console and the audit log.
func openUI(ctx context.Context, t *testing.T, url string, logs *syncBuffer) *ui {
	t.Helper()
	page := cdp.Start(t).NewPage(ctx, t)
	if err := page.Call(ctx, "Emulation.setDeviceMetricsOverride", map[string]any{
		"width": 1360, "height": 900, "deviceScaleFactor": 1, "mobile": false}, nil); err != nil {
		t.Fatal(err)
	}
	var nav struct {
		ErrorText string `json:"errorText"`
	}
	if err := page.Call(ctx, "Page.navigate", map[string]any{"url": url + "/"}, &nav); err != nil || nav.ErrorText != "" {
		t.Fatalf("navigate: %v %s", err, nav.ErrorText)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("browser console:\n%s\naudit log:\n%s", page.Logs(), logs.String())
		}
	})
	return &ui{t: t, ctx: ctx, page: page}
}

// openSQLConsole serves the admin API over db (every area's tables must be there)
// with cfg, and the console, opens it in headless Chromium and signs in with the
// full-access token. logs receives the API's log (its audit records).
func openSQLConsole(ctx context.Context, t *testing.T, db idemsql.TxDB[*sql.Tx], cfg admin.Config) (u *ui, logs *syncBuffer) {
	t.Helper()
	logs = &syncBuffer{}
	cfg.Token, cfg.Console, cfg.Logger = fullToken, console.Handler(), slog.New(slog.NewJSONHandler(logs, nil))
	if skipped, err := admin.ForSQL(ctx, db, &cfg); err != nil || len(skipped) != 0 {
		t.Fatalf("ForSQL: skipped %v, %v", skipped, err)
	}
	h, err := admin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	u = openUI(ctx, t, hs.URL, logs)
	u.signIn(fullToken, "alice")
	return u, logs
}

// signIn waits for the token form, signs in with token as actor, and waits for the
// console's first refresh.
func (u *ui) signIn(token, actor string) {
	u.t.Helper()
	u.waitTrue("the token form", `!document.getElementById('login').hidden`)
	u.run(`document.getElementById('token').value = ` + jsString(token) + `;
		document.getElementById('actor').value = ` + jsString(actor) + `;
		document.getElementById('login-form').requestSubmit()`)
	u.waitTrue("the console", `window.idemConsole.ready && idemConsole.refreshes > 0`)
}

func needChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(cdp.ChromiumPath); err != nil {
		if os.Getenv("IDEM_REQUIRE_SERVICES") == "1" {
			t.Fatalf("IDEM_REQUIRE_SERVICES=1 but %s is missing (apt-get install chromium): %v", cdp.ChromiumPath, err)
		}
		t.Skipf("%s not installed: %v", cdp.ChromiumPath, err)
	}
}

// ui drives the page by evaluating JavaScript in it.
type ui struct {
	t    *testing.T
	ctx  context.Context
	page *cdp.Page
}

func (u *ui) run(js string) {
	u.t.Helper()
	var out any
	if err := u.page.Eval(u.ctx, "(() => { "+js+"; return true })()", &out); err != nil {
		u.t.Fatal(err)
	}
}

// waitTrue polls cond (a JavaScript expression) until it is true, for at most 30s.
func (u *ui) waitTrue(what, cond string) {
	u.t.Helper()
	ctx, cancel := context.WithTimeout(u.ctx, 30*time.Second)
	defer cancel()
	var last error
	for {
		var ok bool
		last = u.page.Eval(ctx, "!!(() => { try { return "+cond+" } catch (e) { return false } })()", &ok)
		if last == nil && ok {
			return
		}
		select {
		case <-ctx.Done():
			u.t.Fatalf("waiting for %s (%s): %v", what, cond, last)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

func (u *ui) wantTrue(what, cond string) {
	u.t.Helper()
	var ok bool
	if err := u.page.Eval(u.ctx, "!!("+cond+")", &ok); err != nil || !ok {
		u.t.Errorf("%s: %s is not true (%v)", what, cond, err)
	}
}

// wantText checks the text of the element matching selector.
func (u *ui) wantText(selector, want string) {
	u.t.Helper()
	var got *string
	if err := u.page.Eval(u.ctx, `(() => { const e = document.querySelector(`+jsString(selector)+`); return e ? e.textContent : null })()`, &got); err != nil {
		u.t.Fatal(err)
	}
	if got == nil {
		u.t.Errorf("no element %s", selector)
	} else if *got != want {
		u.t.Errorf("%s: text %q, want %q", selector, *got, want)
	}
}

// screenshot saves the page as console-<name>.png in $IDEM_SCREENSHOT_DIR (make
// test sets it), else in test-output at the module root.
func (u *ui) screenshot(name string) {
	u.t.Helper()
	png, err := u.page.Screenshot(u.ctx)
	if err != nil {
		u.t.Errorf("screenshot: %v", err)
		return
	}
	dir := os.Getenv("IDEM_SCREENSHOT_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "test-output")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		u.t.Error(err)
		return
	}
	path := filepath.Join(dir, "console-"+name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		u.t.Error(err)
		return
	}
	u.t.Logf("screenshot: %s", path)
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// wantAudit checks the audit log has a record of route with reason.
func wantAudit(t *testing.T, logs *syncBuffer, route, reason string) {
	t.Helper()
	for _, line := range strings.Split(logs.String(), "\n") {
		var rec struct {
			Msg, Route, Why, Outcome string
			Who                      struct{ Access, Actor string }
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "admin: audit" && rec.Route == route && rec.Why == reason {
			if rec.Outcome != "ok" || rec.Who.Access != "full" || rec.Who.Actor != "alice" {
				t.Errorf("audit record %s", line)
			}
			return
		}
	}
	t.Errorf("no audit record of %s with reason %q", route, reason)
}

// startTraffic feeds reg: claims on a real idemmem store (acquired, then replayed),
// and idem's HTTP, inbox and relay collectors, until the returned stop is called.
func startTraffic(t *testing.T, reg *prometheus.Registry) (stop func()) {
	t.Helper()
	store, err := idemmem.New(idemmem.Config{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	httpm, err := metrics.NewHTTP(reg)
	if err != nil {
		t.Fatal(err)
	}
	inbox, err := metrics.NewInbox(reg, "billing")
	if err != nil {
		t.Fatal(err)
	}
	relay, err := metrics.NewRelay(reg, func() (float64, float64, float64) { return 0, 0, 0 })
	if err != nil {
		t.Fatal(err)
	}
	// The relay's oldest-age gauge is left out of the registry to show an absent metric.
	if !reg.Unregister(oldestAgeOnly{}) {
		t.Fatal("idem_outbox_oldest_age_seconds not unregistered")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			k := idem.Key{Scope: "orders", ID: fmt.Sprint(i)}
			if res, err := store.Claim(ctx, idem.Claim{Key: k}); err == nil && res.Outcome == idem.Acquired {
				_ = store.Complete(ctx, k, res.Token, []byte("ok"))
			}
			_, _ = store.Claim(ctx, idem.Claim{Key: k}) // replayed: a duplicate suppressed
			start := httpm.Start()
			httpm.Done(metrics.HTTPExecuted, start)
			if i%3 == 0 {
				httpm.Done(metrics.HTTPConflict, start)
				inbox.DeadLettered("permanent")
			}
			relay.Published([]float64{0.01 * float64(1+i%5)})
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() { cancel(); <-done }
}

// oldestAgeOnly describes idem_outbox_oldest_age_seconds alone, to unregister it.
type oldestAgeOnly struct{}

func (oldestAgeOnly) Describe(ch chan<- *prometheus.Desc) {
	ch <- prometheus.NewDesc("idem_outbox_oldest_age_seconds", "Age of the oldest unpublished outbox message.", nil, nil)
}
func (oldestAgeOnly) Collect(chan<- prometheus.Metric) {}

// storedResponse returns the result idemhttp's Middleware stores for a request
// answered by handle.
func storedResponse(t *testing.T, handle http.HandlerFunc) []byte {
	t.Helper()
	store, err := idemmem.New(idemmem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	scope := func(*http.Request) (string, error) { return "s", nil }
	mw, err := idemhttp.Middleware(idemhttp.Config{Store: store, Scope: scope})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/", nil)
	r.Header.Set(idemhttp.HeaderKey, "k")
	mw(handle).ServeHTTP(httptest.NewRecorder(), r)
	rec, err := store.Inspect(context.Background(), idem.Key{Scope: "s", ID: "k"})
	if err != nil {
		t.Fatal(err)
	}
	return rec.Result
}

// syncBuffer is a bytes.Buffer for a logger and a reader on other goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
