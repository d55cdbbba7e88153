package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin/view"
	"github.com/idemhq/idem/cmd/idem/internal/operator"
	"github.com/idemhq/idem/queue"
)

type queueStatusJSON struct {
	Topics []view.QueueTopic `json:"topics"`
}

type queueListJSON struct {
	Messages  []view.QueueMessage `json:"messages"`
	NextAfter int64               `json:"next_after"`
}

// `idem queue` on every database: status counts a topic's messages by state,
// list pages through them (a hostile topic is escaped), cancel finishes one,
// which then lists as finished, and a second cancel exits 3.
func TestQueueCommand(t *testing.T) {
	t.Parallel()
	forEachOpsDB(t, true, func(t *testing.T, d opsDB) {
		ctx := context.Background()
		db := []string{"--db", d.url}
		cmd := func(action string, args ...string) []string {
			return append(append([]string{"queue", action}, db...), args...)
		}
		wantCode(t, 1, "migrate up", cmd("status")...) // no idem_queue yet

		q, err := queue.New(ctx, d.db, queue.Config{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := q.InsertTx(ctx, tx,
				queue.Job{Message: idem.Message{ID: "o1", Topic: "orders"}},
				queue.Job{Message: idem.Message{ID: "o2", Topic: "orders", OrderingKey: "c1"}},
				queue.Job{Message: idem.Message{ID: "o3", Topic: "orders"}},
				queue.Job{Message: idem.Message{ID: "x1", Topic: "evil\x1b[31m"}, RunAt: time.Now().Add(time.Hour)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		src, err := q.Source(queue.SourceConfig{Topic: "orders", Worker: "worker-1"})
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		if ds, err := src.Receive(ctx, 1); err != nil || len(ds) != 1 {
			t.Fatalf("claim %v, %v", ds, err)
		}

		var st queueStatusJSON
		decode(t, mustRun(t, cmd("status", "--json")...), &st)
		if len(st.Topics) != 2 || st.Topics[0] != (view.QueueTopic{Topic: "evil\x1b[31m", Scheduled: 1}) ||
			st.Topics[1].Topic != "orders" || st.Topics[1].Ready != 2 || st.Topics[1].Running != 1 {
			t.Fatalf("queue status --json: %+v", st)
		}
		decode(t, mustRun(t, cmd("status", "--json", "--topic", "orders")...), &st)
		if len(st.Topics) != 1 {
			t.Fatalf("queue status --topic orders: %+v", st)
		}
		out := mustRun(t, cmd("status")...)
		noRawControls(t, out)
		if !strings.Contains(out, "READY") || !strings.Contains(out, "total") {
			t.Fatalf("queue status:\n%s", out)
		}

		var page queueListJSON
		decode(t, mustRun(t, cmd("list", "--json", "--topic", "orders", "--limit", "2")...), &page)
		if len(page.Messages) != 2 || page.NextAfter != page.Messages[1].ID || page.Messages[0].State != "running" ||
			page.Messages[0].LeasedBy != "worker-1" || page.Messages[1].OrderingKey != "c1" {
			t.Fatalf("queue list --limit 2: %+v", page)
		}
		decode(t, mustRun(t, cmd("list", "--json", "--topic", "orders", "--after", strconv.FormatInt(page.NextAfter, 10))...), &page)
		if len(page.Messages) != 1 || page.Messages[0].MessageID != "o3" || page.NextAfter != 0 {
			t.Fatalf("queue list, second page: %+v", page)
		}
		out = mustRun(t, cmd("list")...)
		noRawControls(t, out)
		if !strings.Contains(out, "4 unfinished messages") || !strings.Contains(out, "worker-1") {
			t.Fatalf("queue list:\n%s", out)
		}

		wantCode(t, 2, "--reason is required", cmd("cancel", "--topic", "orders", "--id", "o2")...)
		wantCode(t, 2, "--topic is required", cmd("cancel", "--id", "o2", "--reason", "r")...)
		wantCode(t, 2, "--state", cmd("list", "--state", "done")...)
		wantCode(t, 2, "--limit", cmd("list", "--limit", "1001")...)
		out = mustRun(t, cmd("cancel", "--topic", "orders", "--id", "o2", "--reason", "customer withdrew")...)
		if !strings.Contains(out, "cancelled queue message o2") {
			t.Fatalf("queue cancel: %s", out)
		}
		wantCode(t, operator.ExitNotFound, "nothing cancelled", cmd("cancel", "--topic", "orders", "--id", "o2", "--reason", "again")...)
		page = queueListJSON{} // decoding into the last page would keep its fields that this one omits
		decode(t, mustRun(t, cmd("list", "--json", "--state", "finished")...), &page)
		if len(page.Messages) != 1 || page.Messages[0].MessageID != "o2" || page.Messages[0].State != "cancelled" ||
			page.Messages[0].LastError != "customer withdrew" {
			t.Fatalf("queue list --state finished: %+v", page)
		}

		// idem admin --db turns the queue area on: the database has idem_queue.
		_, addrs := startDaemon(t, adminListeningRE, "admin", "--listen", "127.0.0.1:0", "--db", d.url, "--token", testAdminToken)
		code, body := apiGet(t, "http://"+addrs[0]+"/api/queue", testAdminToken)
		if err := json.Unmarshal([]byte(body), &st); err != nil || code != 200 || len(st.Topics) != 2 || st.Topics[1].Ready != 1 {
			t.Fatalf("idem admin's /api/queue: %d %s", code, body)
		}
		// One view on both surfaces: the API's page is the CLI's.
		var api struct {
			Messages []view.QueueMessage `json:"messages"`
			Next     string              `json:"next"`
		}
		code, body = apiGet(t, "http://"+addrs[0]+"/api/queue/messages?state=finished", testAdminToken)
		if err := json.Unmarshal([]byte(body), &api); err != nil || code != 200 || !reflect.DeepEqual(api.Messages, page.Messages) {
			t.Fatalf("idem admin's finished messages %d %s\nthe CLI's %+v", code, body, page.Messages)
		}
	})
}
