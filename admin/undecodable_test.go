package admin_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/migrate"
)

// undecodable holds, on one database, rows another service wrote by hand next to
// good ones: a dead letter and a parked message whose headers are not a JSON
// object of strings, a saga whose results are not a JSON object, and on SQLite
// (which keeps any value in any column) rows with text where a number belongs.
type undecodable struct {
	goodLetter, badLetter, typedLetter int64
	goodParked, badParked, typedParked int64
}

func writeUndecodable(t *testing.T, b backend) undecodable {
	t.Helper()
	if err := migrate.Up(context.Background(), b.db, migrate.Inbox, migrate.Outbox, migrate.Effect, migrate.Saga); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	var u undecodable
	u.goodLetter = sqltest.DeadLetter(t, b.db, "dl-good-1", `{"tenant":"t-1"}`, now)
	u.badLetter = sqltest.DeadLetter(t, b.db, "dl-bad", `{"n":1}`, now)
	sqltest.DeadLetter(t, b.db, "dl-good-2", `{}`, now)
	u.goodParked = sqltest.Parked(t, b.db, "m-good", `{"tenant":"t-1"}`, 3)
	u.badParked = sqltest.Parked(t, b.db, "m-bad", `not json`, 3)
	sqltest.Saga(t, b.db, "s-good", "failed", `{}`, 1)
	sqltest.Saga(t, b.db, "s-bad", "failed", `{"charge":42}`, 1)
	if b.db.Dialect() == idemsql.SQLite {
		u.typedLetter = sqltest.DeadLetter(t, b.db, "dl-typed", `{}`, "yesterday")
		u.typedParked = sqltest.Parked(t, b.db, "m-typed", `{}`, "many")
		sqltest.Saga(t, b.db, "s-typed", "failed", `{}`, "twice")
	}
	return u
}

// TestUndecodableRows: one malformed dead letter, parked message or saga no longer
// fails the list, the detail or the actions of every other row: each shows with
// its decode_error, on SQLite, PostgreSQL and MariaDB.
func TestUndecodableRows(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		u := writeUndecodable(t, b)
		a, logs := sqlAPI(t, b)

		var letters struct {
			DeadLetters []struct {
				ID          int64
				MessageID   string `json:"message_id"`
				DecodeError string `json:"decode_error"`
			}
		}
		wantJSON(t, a.do("GET", "/api/deadletters", ""), &letters)
		seen := map[string]string{}
		for _, d := range letters.DeadLetters {
			seen[d.MessageID] = d.DecodeError
		}
		if len(seen) != 3+boolInt(u.typedLetter != 0) || seen["dl-good-1"] != "" || seen["dl-good-2"] != "" ||
			!strings.HasPrefix(seen["dl-bad"], "headers: not a JSON object of strings") {
			t.Fatalf("dead letters %+v", letters)
		}
		if u.typedLetter != 0 && !strings.HasPrefix(seen["dl-typed"], "dead_at: ") {
			t.Errorf("dead letter with text in dead_at: decode_error %q", seen["dl-typed"])
		}
		var one struct {
			Consumer    string
			Headers     map[string]string
			DecodeError string `json:"decode_error"`
		}
		wantJSON(t, a.do("GET", fmt.Sprint("/api/deadletters/", u.badLetter), ""), &one)
		if one.Consumer != "billing" || !strings.Contains(one.DecodeError, "headers") {
			t.Fatalf("bad dead letter %+v", one)
		}
		one.Headers, one.DecodeError = nil, ""
		wantJSON(t, a.do("GET", fmt.Sprint("/api/deadletters/", u.goodLetter), ""), &one)
		if one.Headers["tenant"] != "t-1" || one.DecodeError != "" {
			t.Fatalf("good dead letter %+v", one)
		}

		var parked struct {
			Messages []struct {
				MessageID   string `json:"message_id"`
				DecodeError string `json:"decode_error"`
			}
		}
		wantJSON(t, a.do("GET", "/api/outbox/parked", ""), &parked)
		seen = map[string]string{}
		for _, m := range parked.Messages {
			seen[m.MessageID] = m.DecodeError
		}
		if len(seen) != 2+boolInt(u.typedParked != 0) || seen["m-good"] != "" || !strings.HasPrefix(seen["m-bad"], "headers: not a JSON object") {
			t.Fatalf("parked %+v", parked)
		}
		if u.typedParked != 0 && !strings.HasPrefix(seen["m-typed"], "attempts: ") {
			t.Errorf("parked message with text in attempts: decode_error %q", seen["m-typed"])
		}

		var sagas struct {
			Sagas []struct {
				ID          string
				DecodeError string `json:"decode_error"`
			}
		}
		wantJSON(t, a.do("GET", "/api/sagas?state=failed", ""), &sagas)
		seen = map[string]string{}
		for _, s := range sagas.Sagas {
			seen[s.ID] = s.DecodeError
		}
		if len(seen) != 2+boolInt(b.db.Dialect() == idemsql.SQLite) || seen["s-good"] != "" || seen["s-bad"] != "" {
			t.Fatalf("sagas %+v", sagas) // the list does not read results
		}
		if b.db.Dialect() == idemsql.SQLite && !strings.HasPrefix(seen["s-typed"], "attempts: ") {
			t.Errorf("saga with text in attempts: decode_error %q", seen["s-typed"])
		}
		var d struct {
			State       string
			DecodeError string `json:"decode_error"`
		}
		wantJSON(t, a.do("GET", "/api/sagas/s-bad", ""), &d)
		if d.State != "failed" || !strings.HasPrefix(d.DecodeError, "results: not a JSON object") {
			t.Fatalf("bad saga %+v", d)
		}
		wantProblem(t, a.do("POST", "/api/sagas/s-bad/retry", `{"reason":"try"}`), 409, admin.ProblemConflict, "cannot be decoded", "resolve")

		// The actions an operator needs on them work.
		wantJSON(t, a.do("POST", "/api/sagas/s-bad/resolve", `{"note":"refunded by hand"}`), &struct{}{})
		wantJSON(t, a.do("POST", fmt.Sprint("/api/outbox/parked/", u.badParked, "/discard"), `{"reason":"bad headers"}`), &struct{}{})
		wantJSON(t, a.do("POST", fmt.Sprint("/api/deadletters/", u.badLetter, "/discard"), `{"reason":"bad headers"}`), &struct{}{})
		if strings.Contains(logs.String(), "request failed") {
			t.Errorf("the API logged failures:\n%s", logs)
		}
	})
}

// A requested replay of a dead letter whose headers cannot be decoded gives up at
// once, saying why, without running the handler on part of the message; the
// letters after it are replayed.
func TestReplayUndecodableDeadLetter(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		u := writeUndecodable(t, b)
		var calls atomic.Int64
		handle := func(context.Context, *sql.Tx, idem.Message) error { calls.Add(1); return nil }
		c, err := inbox.New(ctx, idleSource{}, b.db, b.store, handle, inbox.Config{Consumer: "billing",
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		a := inbox.NewDeadLetterAdmin(b.db)
		if _, err := a.RequestReplay(ctx, []int64{u.badLetter, u.goodLetter}, "retry all"); err != nil {
			t.Fatal(err)
		}
		if n, err := c.ReplayRequested(ctx); err != nil || n != 1 {
			t.Fatalf("ReplayRequested = %d, %v; want the good letter replayed", n, err)
		}
		if n := calls.Load(); n != 1 {
			t.Fatalf("the handler ran %d times, want 1 (the good letter only)", n)
		}
		dl, err := a.Get(ctx, u.badLetter)
		if err != nil {
			t.Fatal(err)
		}
		if dl.State != inbox.StatePending || !strings.HasPrefix(dl.LastReplayError, "gave up: ") ||
			!strings.Contains(dl.LastReplayError, "cannot be decoded") {
			t.Fatalf("bad letter after its replay %+v", dl)
		}
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
