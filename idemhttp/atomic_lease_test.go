package idemhttp_test

import (
	"context"
	"database/sql"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
)

// A handler behind AtomicMiddleware that runs longer than Config.Lease still
// commits: the claim is held by the transaction, not by a lease nobody renews. The
// handler outlives the lease by progress, not by time: it moves the store's clock
// past the lease before it writes.
func TestAtomicMiddlewareSlowerThanLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := &chaos.Clock{}
	s := mwMust(idemsqlite.Open(ctx, filepath.Join(t.TempDir(), "idem.db"), idemsqlite.Config{Now: clock.Now}))(t)
	t.Cleanup(func() { s.Close() })
	db := mwMust(idemsql.SQLDB(ctx, s.DB()))(t)
	if _, err := s.DB().ExecContext(ctx, "CREATE TABLE slow_orders (id TEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	const lease = time.Second
	mw := mwMust(idemhttp.AtomicMiddleware(db, s, idemhttp.Config{Lease: lease, MaxKeyAge: -1, Now: clock.Now}))(t)
	runs := 0
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		clock.Jump(3 * lease) // the handler took three leases
		tx, _ := idemhttp.TxFrom[*sql.Tx](r.Context())
		if _, err := tx.ExecContext(r.Context(), "INSERT INTO slow_orders (id) VALUES ('o1')"); err != nil {
			t.Error(err)
		}
		w.WriteHeader(http.StatusCreated)
	}))
	key := idemkey.NewV7()
	for attempt := 1; attempt <= 2; attempt++ {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{}`))
		req.Header.Set(idemhttp.HeaderKey, key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusCreated {
			t.Fatalf("attempt %d: %d %s: a handler slower than the lease must still commit", attempt, rec.Code, rec.Body)
		}
	}
	var n int
	if err := s.DB().QueryRowContext(ctx, "SELECT count(*) FROM slow_orders").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 || runs != 1 {
		t.Fatalf("%d rows, %d runs: want the effect once, and the retry replayed", n, runs)
	}
}
