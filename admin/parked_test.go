package admin_test

import (
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/sagatest"
	"github.com/idemhq/idem/internal/sqltest"
)

// A saga the orchestrator parked (its results, written by another service, are
// not a JSON object) is listed by GET /api/sagas?state=parked and shown marked
// parked, without a next run, its reason saying why; its steps' effects written
// by hand are shown, and on SQLite the one with text in its token is listed by
// GET /api/effects and in the saga's steps with its decode_error. On SQLite,
// PostgreSQL and MariaDB.
func TestParkedSagasAndUndecodableEffects(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		typed := sagatest.ParkWithSteps(t, b.db, "s-bad")
		sqltest.Saga(t, b.db, "s-good", "failed", `{}`, 0)
		a, logs := sqlAPI(t, b)

		type sagaJSON struct {
			ID, State, Reason string
			Parked            bool
			NextAt            string `json:"next_at"`
			Steps             []struct {
				Name        string
				DecodeError string `json:"decode_error"`
			}
		}
		var page struct{ Sagas []sagaJSON }
		wantJSON(t, a.do("GET", "/api/sagas?state=parked", ""), &page)
		if len(page.Sagas) != 1 || page.Sagas[0].ID != "s-bad" || !page.Sagas[0].Parked || page.Sagas[0].State != "running" ||
			!strings.Contains(page.Sagas[0].Reason, "its row cannot be decoded: results: not a JSON object") {
			t.Fatalf("parked sagas %+v, want s-bad, running, parked, saying why", page)
		}
		var failed struct{ Sagas []sagaJSON }
		wantJSON(t, a.do("GET", "/api/sagas?state=failed", ""), &failed)
		if len(failed.Sagas) != 1 || failed.Sagas[0].Parked {
			t.Fatalf("failed sagas %+v, want s-good, not parked", failed)
		}
		var d sagaJSON
		wantJSON(t, a.do("GET", "/api/sagas/s-bad", ""), &d)
		if !d.Parked || d.NextAt != "" || len(d.Steps) != 1+boolInt(typed) {
			t.Fatalf("parked saga %+v, want it parked, no next run, its steps", d)
		}
		var effects struct {
			Effects []struct {
				Key, Step   string
				DecodeError string `json:"decode_error"`
			}
		}
		wantJSON(t, a.do("GET", "/api/effects", ""), &effects)
		if len(effects.Effects) != 1+boolInt(typed) {
			t.Fatalf("effects %+v, want %d", effects, 1+boolInt(typed))
		}
		for _, e := range effects.Effects {
			if bad := e.Step == "do:charge"; bad != strings.HasPrefix(e.DecodeError, "token: ") {
				t.Errorf("effect %+v: want a decode error on the token of do:charge only", e)
			}
		}
		for _, s := range d.Steps {
			if bad := s.Name == "do:charge"; bad != strings.HasPrefix(s.DecodeError, "token: ") {
				t.Errorf("step %+v: want a decode error on the token of do:charge only", s)
			}
		}
		if strings.Contains(logs.String(), "request failed") {
			t.Errorf("the API logged failures:\n%s", logs)
		}
	})
}
