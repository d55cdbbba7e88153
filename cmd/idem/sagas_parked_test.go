package main

import (
	"encoding/json"
	"testing"

	"github.com/idemhq/idem/internal/sagatest"
	"github.com/idemhq/idem/internal/sqltest"
)

// TestSagasParked: a saga the orchestrators parked (its results, written by
// another service, are not a JSON object) is listed by `idem sagas list --state
// parked`, marked parked there and in `sagas show`; on SQLite a step effect with
// text in its token is marked in show's steps, with a note saying why.
func TestSagasParked(t *testing.T) {
	t.Parallel()
	forEachOpsDB(t, true, func(t *testing.T, d opsDB) {
		typed := sagatest.ParkWithSteps(t, d.db, "s-parked")
		sqltest.Saga(t, d.db, "s-failed", "failed", `{}`, 1)
		db := []string{"--db", d.url}
		cmd := func(args ...string) []string { return append(args, db...) }

		out := mustRun(t, cmd("sagas", "list", "--state", "parked")...)
		wantLines(t, out, "s-parked", "running (parked)", "parked at ", "1 sagas")
		var page struct {
			Sagas []struct {
				ID     string
				Parked bool
			}
		}
		if err := json.Unmarshal([]byte(mustRun(t, cmd("sagas", "list", "--json")...)), &page); err != nil {
			t.Fatal(err)
		}
		if len(page.Sagas) != 2 || page.Sagas[0].ID != "s-failed" || page.Sagas[0].Parked || !page.Sagas[1].Parked {
			t.Fatalf("sagas list --json: %+v, want s-failed, and s-parked parked", page)
		}
		out = mustRun(t, cmd("sagas", "show", "--id", "s-parked")...)
		wantLines(t, out, "running (parked)", "PARKED", "its row cannot be decoded: results", "do:reserve")
		if typed {
			wantLines(t, out, "do:charge !", "! do:charge: its row cannot be decoded: token: ")
		}
	})
}
