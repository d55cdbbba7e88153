package admin_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/internal/testsvc"
)

// TestRefusedFlood: 2,000 changes without a valid token, sent by 8 goroutines
// with a caller-chosen X-Idem-Actor, are all counted in idem_admin_refused_total,
// but write RefusedLogBurst audit records while the clock stands still, none of
// them naming the actor; once RefusedLogEvery has passed, the next record says
// how many were left out. Records of calls with a valid token are never rationed.
func TestRefusedFlood(t *testing.T) {
	t.Parallel()
	var logs testsvc.Buffer
	reg := prometheus.NewRegistry()
	var mu sync.Mutex
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	h, err := admin.New(admin.Config{Token: fullToken, Registerer: reg, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	if err != nil {
		t.Fatal(err)
	}
	post := func(auth string) int {
		r := httptest.NewRequest("POST", "/api/keys/evict", strings.NewReader(`{"scope":"s","id":"k","force":true,"reason":"r"}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("X-Idem-Actor", "root (verified by SSO)")
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}

	const workers, each = 8, 250
	var wg sync.WaitGroup
	codes := make(chan int, workers*each)
	for w := range workers {
		wg.Go(func() {
			auth := "" // half send no token, half a wrong one
			if w%2 == 1 {
				auth = "Bearer guessed-token-0123456789"
			}
			for range each {
				codes <- post(auth)
			}
		})
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusUnauthorized {
			t.Fatalf("status %d, want 401", c)
		}
	}
	recs := typedAudit(t, &logs)
	if len(recs) != admin.RefusedLogBurst {
		t.Fatalf("%d audit records for %d refused changes, want %d", len(recs), workers*each, admin.RefusedLogBurst)
	}
	for _, rec := range recs {
		if rec.Level != "WARN" || rec.Who.Access != "unauthenticated" || rec.Who.Actor != nil || rec.Status != 401 ||
			(rec.Refused != "no_token" && rec.Refused != "bad_token") {
			t.Fatalf("audit record %+v", rec)
		}
	}
	if got := refusedTotal(t, reg); got["no_token"] != workers*each/2 || got["bad_token"] != workers*each/2 {
		t.Fatalf("idem_admin_refused_total = %v, want %d of no_token and of bad_token", got, workers*each/2)
	}

	// A change with the token is recorded, budget or not, with its actor.
	if c := post("Bearer " + fullToken); c != http.StatusNotFound { // the keys area is not configured
		t.Fatalf("status %d with the token, want 404", c)
	}
	recs = typedAudit(t, &logs)
	if last := recs[len(recs)-1]; len(recs) != admin.RefusedLogBurst+1 || last.Who.Access != "full" || last.Who.Actor == nil || last.Level != "INFO" {
		t.Fatalf("record of the change with the token %+v", last)
	}

	mu.Lock()
	now = now.Add(admin.RefusedLogEvery)
	mu.Unlock()
	post("")
	recs = typedAudit(t, &logs)
	if last := recs[len(recs)-1]; len(recs) != admin.RefusedLogBurst+2 || last.Skipped != workers*each-admin.RefusedLogBurst {
		t.Fatalf("first record after %v: %+v (%d records), want skipped %d", admin.RefusedLogEvery, last, len(recs), workers*each-admin.RefusedLogBurst)
	}
}

// refusedTotal returns idem_admin_refused_total by reason.
func refusedTotal(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "idem_admin_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

type auditRecord struct {
	Level string
	Who   struct {
		Access string
		Actor  *string
	}
	Status  int
	Refused string
	Skipped int64
}

func typedAudit(t *testing.T, logs *testsvc.Buffer) []auditRecord {
	t.Helper()
	var out []auditRecord
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec struct {
			Msg string
			auditRecord
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		if rec.Msg == "admin: audit" {
			out = append(out, rec.auditRecord)
		}
	}
	return out
}
