package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/cmd/idem/internal/operator"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/migrate"
)

// TestOpsRowsWrittenByHand: rows another service wrote by hand (headers that are
// not a JSON object of strings, results that are not a JSON object) do not stop
// `idem dlq`, `idem outbox` or `idem sagas`: each lists every row, marks the bad
// one with a note saying why, shows it, and acts on it where that makes sense.
func TestOpsRowsWrittenByHand(t *testing.T) {
	t.Parallel()
	forEachOpsDB(t, true, func(t *testing.T, d opsDB) {
		if err := migrate.Up(context.Background(), d.db, migrate.Inbox, migrate.Outbox, migrate.Effect, migrate.Saga); err != nil {
			t.Fatal(err)
		}
		now := time.Now().UnixMilli()
		sqltest.DeadLetter(t, d.db, "dl-good", `{"tenant":"t-1"}`, now)
		bad := sqltest.DeadLetter(t, d.db, "dl-bad", `not json`, now)
		sqltest.Parked(t, d.db, "m-good", `{}`, 3)
		badParked := sqltest.Parked(t, d.db, "m-bad", `{"n":1}`, 3)
		sqltest.Saga(t, d.db, "s-good", "failed", `{}`, 1)
		sqltest.Saga(t, d.db, "s-bad", "failed", `[1,2]`, 1)
		db := []string{"--db", d.url}
		cmd := func(args ...string) []string { return append(args, db...) }

		out := mustRun(t, cmd("dlq", "list")...)
		wantLines(t, out, fmt.Sprint(bad, " !"), fmt.Sprint("! ", bad, ": its row cannot be decoded: headers: not a JSON object of strings"),
			"2 dead letters")
		var letters struct {
			DeadLetters []struct {
				DecodeError string `json:"decode_error"`
			} `json:"dead_letters"`
		}
		if err := json.Unmarshal([]byte(mustRun(t, cmd("dlq", "list", "--json")...)), &letters); err != nil {
			t.Fatal(err)
		}
		if len(letters.DeadLetters) != 2 || letters.DeadLetters[0].DecodeError != "" || letters.DeadLetters[1].DecodeError == "" {
			t.Fatalf("dlq list --json: %+v", letters)
		}
		wantLines(t, mustRun(t, cmd("dlq", "show", "--id", fmt.Sprint(bad))...), "DECODE ERROR", "dl-bad")
		mustRun(t, cmd("dlq", "discard", "--id", fmt.Sprint(bad), "--reason", "written by hand")...)

		out = mustRun(t, cmd("outbox", "parked")...)
		wantLines(t, out, fmt.Sprint(badParked, " !"), fmt.Sprint("! ", badParked, ": its row cannot be decoded: headers: not a JSON object of strings"),
			"2 parked messages")

		wantLines(t, mustRun(t, cmd("sagas", "list")...), "s-bad", "2 sagas")
		out = mustRun(t, cmd("sagas", "show", "--id", "s-bad")...)
		wantLines(t, out, "DECODE ERROR", "results: not a JSON object")
		wantCode(t, operator.ExitConflict, "cannot be decoded", cmd("sagas", "retry", "--id", "s-bad", "--reason", "try")...)
		mustRun(t, cmd("sagas", "resolve", "--id", "s-bad", "--note", "refunded by hand")...)
	})
}
