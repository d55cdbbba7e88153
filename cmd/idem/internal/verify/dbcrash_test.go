package verify

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestDBCrashReport: the database crash section in the table and the JSON, and a
// run with fewer kills than asked, or no progress after a restart, fails.
func TestDBCrashReport(t *testing.T) {
	ok := DBCrashStats{Asked: 2, Kills: 2, Restarts: 2, Outages: []Outage{
		{AtPlaced: 100, Down: 400 * time.Millisecond, FirstAck: 500 * time.Millisecond, PlacedAfter: 90, AppliedAfter: 10, Warnings: 7},
		{AtPlaced: 200, Down: 300 * time.Millisecond, FirstAck: 350 * time.Millisecond, PlacedAfter: 100, AppliedAfter: 290},
	}}
	r := &Report{Rows: []Row{{Boundary: BoundaryHTTP, Attempts: 1, EffectsApplied: 1}}, DBCrash: &ok}
	if !r.OK() {
		t.Fatal("a run whose kills all happened and resumed is not OK")
	}
	var buf bytes.Buffer
	if err := r.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"database crash: 2 of 2 kills", "crash 1 at 100 orders acknowledged: server down 0.40s, first order acknowledged 0.50s after the kill; then 90 orders acknowledged, 10 applied; 7 warnings"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
	buf.Reset()
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var out struct {
		DBCrash DBCrashStats `json:"db_crash"`
	}
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil || out.DBCrash.Kills != 2 || out.DBCrash.Outages[1].Down != 300*time.Millisecond {
		t.Fatalf("JSON db_crash = %+v (%v) in %s", out.DBCrash, err, buf.String())
	}

	short := ok
	short.Kills, short.Restarts, short.Outages = 1, 1, ok.Outages[:1]
	stalled := ok
	stalled.Outages = []Outage{ok.Outages[0], {AtPlaced: 200}}
	failed := ok
	failed.Error = "restart 2: boom"
	for name, s := range map[string]DBCrashStats{"fewer kills": short, "no progress": stalled, "error": failed} {
		r.DBCrash = &s
		buf.Reset()
		if err := r.WriteTable(&buf); err != nil {
			t.Fatal(err)
		}
		if r.OK() || !strings.Contains(buf.String(), "FAILED: database crash") {
			t.Errorf("%s: OK %v:\n%s", name, r.OK(), buf.String())
		}
	}
}
