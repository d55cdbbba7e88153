package admin_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/audit"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/outbox"
)

// The audit area over a real outbox and consumer keys (AuditFrom): GET
// /api/audit finds the message the consumer never got, a read token's repair is
// refused and writes nothing, the full token's republishes it once, and GET
// /api/audit/repairs pages what was republished.
func TestAdaptAuditReal(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		ob, err := outbox.New(ctx, b.db, outbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		// The inbox's tables (its dead letters), for a consumer that runs elsewhere.
		if _, err := inbox.New(ctx, idleSource{}, b.db, b.store, func(context.Context, *sql.Tx, idem.Message) error { return nil },
			inbox.Config{Consumer: "billing"}); err != nil {
			t.Fatal(err)
		}
		msgs := []idem.Message{{ID: "m-1", Topic: "orders", Payload: []byte("1")}, {ID: "m-2", Topic: "orders", Payload: []byte("2")}}
		if err := b.db.InTx(ctx, func(tx *sql.Tx) error { _, err := ob.EnqueueTx(ctx, tx, msgs...); return err }); err != nil {
			t.Fatal(err)
		}
		relay, err := ob.Relay(&failSink{}, outbox.RelayConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := relay.RunOnce(ctx); err != nil || n != 2 {
			t.Fatalf("published %d, %v", n, err)
		}
		// The consumer applied m-1 (its key, as the inbox records it); m-2 was lost.
		res, err := b.store.Claim(ctx, idem.Claim{Key: idem.Key{Scope: "billing", ID: "m-1"}, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.store.Complete(ctx, idem.Key{Scope: "billing", ID: "m-1"}, res.Token, nil); err != nil {
			t.Fatal(err)
		}
		if err := b.db.Auto(ctx, func(q idemsql.Querier) error {
			_, err := q.Exec(ctx, "UPDATE idem_outbox SET created_at = created_at - 600000, published_at = published_at - 600000")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		side, err := audit.ConsumersIn(b.db, audit.Consumer{Name: "billing", Topics: []string{"orders"}})
		if err != nil {
			t.Fatal(err)
		}
		a, err := audit.New(b.db, audit.Config{Grace: 5 * time.Minute}, side)
		if err != nil {
			t.Fatal(err)
		}
		h, err := admin.New(admin.Config{Token: fullToken, ReadToken: readToken, Audit: admin.AuditFrom(a), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		call := func(method, target, token, body string) *httptest.ResponseRecorder {
			r := httptest.NewRequest(method, target, strings.NewReader(body))
			if body != "" {
				r.Header.Set("Content-Type", "application/json")
			}
			r.Header.Set("Authorization", "Bearer "+token)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w
		}
		copies := func() (n int64) {
			t.Helper()
			if err := b.db.Auto(ctx, func(q idemsql.Querier) error {
				return q.QueryRow(ctx, "SELECT COUNT(*) FROM idem_outbox WHERE msg_id = 'm-2' AND published_at IS NULL").Scan(&n)
			}); err != nil {
				t.Fatal(err)
			}
			return n
		}

		var rep auditJSON
		wantJSON(t, call("GET", "/api/audit", readToken, ""), &rep)
		if len(rep.Rows) != 1 || rep.Rows[0].Published != 2 || rep.Rows[0].Missing != 1 || rep.Rows[0].MissingIDs[0] != "m-2" {
			t.Fatalf("GET /api/audit: %+v", rep)
		}
		if n := copies(); n != 0 {
			t.Fatalf("a read-only audit wrote %d copies", n)
		}
		wantProblem(t, call("POST", "/api/audit/repair", readToken, `{"reason":"broker lost m-2"}`), http.StatusForbidden, admin.ProblemForbidden)
		if n := copies(); n != 0 {
			t.Fatalf("a read token's repair wrote %d copies", n)
		}
		rep = auditJSON{}
		wantJSON(t, call("POST", "/api/audit/repair", fullToken, `{"reason":"broker lost m-2"}`), &rep)
		if len(rep.Repaired) != 1 || rep.Repaired[0].MsgID != "m-2" || copies() != 1 {
			t.Fatalf("repair: %+v, %d copies", rep.Repaired, copies())
		}

		// A burst of audits at once, read-only and repairing: each answers, one run
		// at a time, and nothing is republished twice (m-2 was repaired less than
		// the grace ago).
		var wg sync.WaitGroup
		for i := range 12 {
			wg.Go(func() {
				var w *httptest.ResponseRecorder
				if i%4 == 0 {
					w = call("POST", "/api/audit/repair", fullToken, `{"reason":"burst"}`)
				} else {
					w = call("GET", "/api/audit", readToken, "")
				}
				var got auditJSON
				if w.Code != http.StatusOK {
					t.Errorf("audit %d in a burst: %d %s", i, w.Code, w.Body)
				} else if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || len(got.Rows) != 1 || len(got.Repaired) != 0 {
					t.Errorf("audit %d in a burst: %+v, %v", i, got, err)
				}
			})
		}
		wg.Wait()
		if n := copies(); n != 1 {
			t.Fatalf("%d copies of m-2 after the burst, want 1", n)
		}

		var page struct {
			Repairs []struct {
				CopyID int64  `json:"copy_id"`
				MsgID  string `json:"msg_id"`
			} `json:"repairs"`
			Next string `json:"next"`
		}
		wantJSON(t, call("GET", "/api/audit/repairs?limit=1", readToken, ""), &page)
		if len(page.Repairs) != 1 || page.Repairs[0].CopyID != rep.Repaired[0].CopyID || page.Next == "" {
			t.Fatalf("repairs page %+v", page)
		}
		next := page.Next
		page.Repairs, page.Next = nil, ""
		wantJSON(t, call("GET", "/api/audit/repairs?limit=1&cursor="+next, readToken, ""), &page)
		if len(page.Repairs) != 0 || page.Next != "" {
			t.Fatalf("the page after the last repair: %+v", page)
		}
	})
}
