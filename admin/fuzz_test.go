package admin_test

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/idemhq/idem"
)

// FuzzKeyQuery sends arbitrary query strings to the routes that parse queries:
// every answer is a 200 or a 4xx problem, never a 500 or a panic.
func FuzzKeyQuery(f *testing.F) {
	for _, s := range []string{
		"scope=t1&id=k1", "scope=t1&id=k1&full=1", "scope=t1&limit=2&cursor=k0", "store=main&scope=t1",
		"scope=%ZZ", "scope=t1&scope=t2", "scope=%00&id=%FF", "limit=-1", "limit=99999999999999999999",
		"since=2026-01-01T00:00:00Z&until=2025-01-01T00:00:00Z", "state=failed", ";;&&==", "full=true&id=",
	} {
		f.Add(s)
	}
	b := setup(f, nil)
	b.ins.put(idem.Record{Key: idem.Key{Scope: "t1", ID: "k1"}, State: idem.StateCompleted, Result: []byte{0xff, 'a'}})
	b.ins.put(idem.Record{Key: idem.Key{Scope: "t1", ID: "k2"}, State: idem.StateInProgress})
	paths := []string{"/api/key", "/api/keys", "/api/deadletters", "/api/deadletters/1", "/api/outbox/parked",
		"/api/effects", "/api/sagas", "/api/sagas/s1"}
	f.Fuzz(func(t *testing.T, q string) {
		for _, p := range paths {
			for _, tok := range []string{readToken, fullToken} {
				r := httptest.NewRequest("GET", p, nil)
				r.URL.RawQuery = q
				r.Header.Set("Authorization", "Bearer "+tok)
				w := b.serve(r)
				if w.Code != 200 && (w.Code < 400 || w.Code >= 500) {
					t.Fatalf("GET %s?%s: status %d: %s", p, q, w.Code, w.Body)
				}
				if !json.Valid(w.Body.Bytes()) {
					t.Fatalf("GET %s?%s: invalid JSON %q", p, q, w.Body)
				}
			}
		}
	})
}
