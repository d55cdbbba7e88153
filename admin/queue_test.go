package admin_test

import (
	"bytes"
	"context"
	"database/sql"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/queue"
)

// TestQueueArea: the queue area over a fake: status, a page, and a cancel
// that needs the full token, a reason, and is audit-logged.
func TestQueueArea(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var st admin.QueueStatus
	wantJSON(t, b.do(t, "GET", "/api/queue", readToken, ""), &st)
	if len(st.Topics) != 1 || st.Topics[0].Topic != "orders" || st.Topics[0].OldestReadyAgeSeconds != 2.5 {
		t.Fatalf("status %+v", st)
	}
	var page admin.QueueMessagePage
	wantJSON(t, b.do(t, "GET", "/api/queue/messages?topic=orders&state=unfinished&limit=10", readToken, ""), &page)
	if len(page.Messages) != 2 || page.Messages[1].LeasedBy != "w1" {
		t.Fatalf("page %+v", page)
	}
	for target, detail := range map[string]string{
		"/api/queue/messages?state=done":                      "state",
		"/api/queue/messages?limit=1001":                      "limit",
		"/api/queue/messages?topic=a%00b":                     "topic",
		"/api/queue/messages?topic=a&topic=b":                 "topic",
		"/api/queue/messages?state=finished&state=unfinished": "state",
	} {
		wantProblem(t, b.do(t, "GET", target, readToken, ""), 400, admin.ProblemInvalid, detail)
	}

	// The read token cannot cancel, whatever it sends.
	wantProblem(t, b.do(t, "POST", "/api/queue/cancel", readToken, `{"topic":"orders","id":"m1","reason":"r"}`), 403, admin.ProblemForbidden)
	wantProblem(t, b.do(t, "POST", "/api/queue/cancel", "", `{"topic":"orders","id":"m1","reason":"r"}`), 401, admin.ProblemUnauthorized)
	for body, detail := range map[string]string{
		`{"topic":"orders","id":"m1"}`:                        "reason is empty",
		`{"topic":"orders","id":"m1","reason":"  "}`:          "",
		`{"id":"m1","reason":"r"}`:                            "topic is empty",
		`{"topic":"orders","reason":"r"}`:                     "id is empty",
		`{"topic":"orders","id":"m1","reason":"r","x":1}`:     "x",
		`{"topic":"orders","id":"m1","id":"m2","reason":"r"}`: "id",
	} {
		if detail == "" {
			continue
		}
		wantProblem(t, b.do(t, "POST", "/api/queue/cancel", fullToken, body), 400, admin.ProblemInvalid, detail)
	}
	if len(b.qu.cancelled) != 0 {
		t.Fatalf("cancelled by a refused call: %v", b.qu.cancelled)
	}
	var done admin.QueueCancelled
	wantJSON(t, b.do(t, "POST", "/api/queue/cancel", fullToken, `{"topic":"orders","id":"m1","reason":"ordered twice"}`), &done)
	if !done.OK || done.ID != "m1" || b.qu.cancelled["m1"] != "ordered twice" {
		t.Fatalf("cancel: %+v, %v", done, b.qu.cancelled)
	}
	wantProblem(t, b.do(t, "POST", "/api/queue/cancel", fullToken, `{"topic":"orders","id":"m1","reason":"again"}`), 404, admin.ProblemNotFound, "m1")

	var found bool
	for _, rec := range b.auditRecords(t) {
		what, _ := rec["what"].(map[string]any)
		if rec["route"] == "POST /api/queue/cancel" && rec["outcome"] == "ok" && rec["why"] == "ordered twice" &&
			what["topic"] == "orders" && what["id"] == "m1" {
			found = true
		}
	}
	if !found {
		t.Errorf("no audit record of the cancel:\n%s", b.logs)
	}
}

// TestQueueAreaSQL: on every database, ForSQL turns the queue area on once
// idem_queue is there; the API shows the topics by state and the messages,
// paged; the read token cannot cancel; the full token cancels one, which
// then lists as finished.
func TestQueueAreaSQL(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		apiOf := func() (tokenAPI, *bytes.Buffer) {
			var cfg admin.Config
			if _, err := admin.ForSQL(ctx, b.db, &cfg); err != nil {
				t.Fatal(err)
			}
			logs := &bytes.Buffer{}
			cfg.Token, cfg.ReadToken, cfg.Logger = fullToken, readToken, slog.New(slog.NewJSONHandler(logs, nil))
			h, err := admin.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			return tokenAPI{h}, logs
		}
		a, _ := apiOf()
		wantProblem(t, a.do("GET", "/api/queue", readToken, ""), 404, admin.ProblemNotConfigured, "queue")

		q, err := queue.New(ctx, b.db, queue.Config{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		err = b.db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := q.InsertTx(ctx, tx,
				queue.Job{Message: idem.Message{ID: "o1", Topic: "orders"}},
				queue.Job{Message: idem.Message{ID: "o2", Topic: "orders"}},
				queue.Job{Message: idem.Message{ID: "o3", Topic: "orders"}},
				queue.Job{Message: idem.Message{ID: "n1", Topic: "nightly"}, RunAt: time.Now().Add(time.Hour)})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		src, err := q.Source(queue.SourceConfig{Topic: "orders", Worker: "worker-1"})
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		if ds, err := src.Receive(ctx, 1); err != nil || len(ds) != 1 || ds[0].ID != "o1" {
			t.Fatalf("claim: %v, %v", ds, err)
		}

		a, logs := apiOf()
		var st admin.QueueStatus
		wantJSON(t, a.do("GET", "/api/queue", readToken, ""), &st)
		if len(st.Topics) != 2 || st.Topics[0] != (admin.QueueTopic{Topic: "nightly", Scheduled: 1}) ||
			st.Topics[1].Topic != "orders" || st.Topics[1].Ready != 2 || st.Topics[1].Running != 1 {
			t.Fatalf("status %+v", st)
		}
		var p1, p2 admin.QueueMessagePage
		wantJSON(t, a.do("GET", "/api/queue/messages?topic=orders&limit=2", readToken, ""), &p1)
		if len(p1.Messages) != 2 || p1.Next == "" || p1.Messages[0].MessageID != "o1" || p1.Messages[0].State != "running" ||
			p1.Messages[0].LeasedBy != "worker-1" || p1.Messages[1].State != "ready" {
			t.Fatalf("first page %+v", p1)
		}
		wantJSON(t, a.do("GET", "/api/queue/messages?topic=orders&limit=2&cursor="+p1.Next, readToken, ""), &p2)
		if len(p2.Messages) != 1 || p2.Messages[0].MessageID != "o3" || p2.Next != "" {
			t.Fatalf("second page %+v", p2)
		}
		wantProblem(t, a.do("GET", "/api/queue/messages?cursor=AA", readToken, ""), 400, admin.ProblemInvalid, "cursor")

		// The attack: a read-only token tries to cancel. Nothing changes.
		wantProblem(t, a.do("POST", "/api/queue/cancel", readToken, `{"topic":"orders","id":"o2","reason":"x"}`), 403, admin.ProblemForbidden)
		var unf admin.QueueMessagePage
		wantJSON(t, a.do("GET", "/api/queue/messages?topic=orders", readToken, ""), &unf)
		if len(unf.Messages) != 3 {
			t.Fatalf("after the refused cancel: %+v", unf)
		}

		// The running one is cancelled: its consumer can no longer retire it.
		var done admin.QueueCancelled
		wantJSON(t, a.do("POST", "/api/queue/cancel", fullToken, `{"topic":"orders","id":"o1","reason":"customer withdrew"}`), &done)
		wantProblem(t, a.do("POST", "/api/queue/cancel", fullToken, `{"topic":"orders","id":"o1","reason":"again"}`), 404, admin.ProblemNotFound, "o1")
		var fin admin.QueueMessagePage
		wantJSON(t, a.do("GET", "/api/queue/messages?state=finished", readToken, ""), &fin)
		if len(fin.Messages) != 1 || fin.Messages[0].MessageID != "o1" || fin.Messages[0].State != "cancelled" ||
			fin.Messages[0].LastError != "customer withdrew" || fin.Messages[0].FinishedAt.IsZero() {
			t.Fatalf("finished %+v", fin)
		}
		wantJSON(t, a.do("GET", "/api/queue", readToken, ""), &st)
		if st.Topics[1].Running != 0 || st.Topics[1].Ready != 2 {
			t.Errorf("status after the cancel %+v", st)
		}
		if !strings.Contains(logs.String(), `"why":"customer withdrew"`) {
			t.Errorf("the cancel is not audit-logged:\n%s", logs)
		}
	})
}

// tokenAPI is a handler that takes each request's token.
type tokenAPI struct{ h http.Handler }

func (a tokenAPI) do(method, target, token, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	a.h.ServeHTTP(w, r)
	return w
}
