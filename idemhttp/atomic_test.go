package idemhttp_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/testsvc"
)

// mwAtomicEnv is one database for the atomic middleware: its transactions, the
// store of keys in the same database, and a business table mw_orders(id).
type mwAtomicEnv[Tx any] struct {
	db    idemsql.TxDB[Tx]
	store idem.TxStore[Tx]
}

func TestAtomicMiddleware(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		s := mwSQLite(t)
		mwAtomicSuite(t, mwAtomicEnv[*sql.Tx]{mwMust(idemsql.SQLDB(ctx, s.DB()))(t), s})
	})
	t.Run("postgres/database-sql", func(t *testing.T) {
		t.Parallel()
		cs, _ := testsvc.PostgresSchema(t)
		db := mwMust(sql.Open("pgx", cs))(t)
		t.Cleanup(func() { db.Close() })
		mwAtomicSuite(t, mwAtomicEnv[*sql.Tx]{mwMust(idemsql.SQLDB(ctx, db))(t), mwMust(idempg.NewSQL(ctx, db, idempg.Config{}))(t)})
	})
	t.Run("postgres/pgx", func(t *testing.T) {
		t.Parallel()
		pool := testsvc.PostgresPool(t)
		mwAtomicSuite[pgx.Tx](t, mwAtomicEnv[pgx.Tx]{idempg.TxDB(pool), mwMust(idempg.New(ctx, pool, idempg.Config{}))(t)})
	})
}

// mwAtomicSuite runs the atomic middleware's cases on env. The handler inserts the
// request body as an order in the request's transaction, then answers as the query
// asks: ?status=N, ?panic=1, ?big=1 (a response beyond MaxBodyBytes).
func mwAtomicSuite[Tx any](t *testing.T, env mwAtomicEnv[Tx]) {
	ctx := context.Background()
	if err := env.db.InTx(ctx, func(tx Tx) error {
		_, err := env.db.Querier(tx).Exec(ctx, "CREATE TABLE mw_orders (id TEXT NOT NULL)")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	count := func(t *testing.T, id string) (n int) {
		t.Helper()
		if err := env.db.InTx(ctx, func(tx Tx) error {
			return env.db.Querier(tx).QueryRow(ctx, "SELECT COUNT(*) FROM mw_orders WHERE id = $1", id).Scan(&n)
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var runs atomic.Int64
	var panicked sync.Map // order IDs whose first run panicked
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		tx, ok := idemhttp.TxFrom[Tx](r.Context())
		if !ok {
			t.Error("TxFrom found no transaction in the handler's context")
			return
		}
		var body bytes.Buffer
		body.ReadFrom(r.Body)
		if _, err := env.db.Querier(tx).Exec(r.Context(), "INSERT INTO mw_orders (id) VALUES ($1)", body.String()); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		q := r.URL.Query()
		switch {
		case q.Get("panic") != "":
			if _, again := panicked.LoadOrStore(body.String(), true); !again {
				panic("after the insert")
			}
			w.WriteHeader(http.StatusCreated)
		case q.Get("big") != "":
			w.Write(bytes.Repeat([]byte("x"), 5000))
		case q.Get("status") == "500":
			http.Error(w, "failed after the insert", http.StatusInternalServerError)
		default:
			w.Header().Set("Location", "/orders/"+body.String())
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte("created " + body.String()))
		}
	})
	no := false
	mw := mwMust(idemhttp.AtomicMiddleware(env.db, env.store, idemhttp.Config{StoreServerErrors: &no, MaxBodyBytes: 4096}))(t)
	srv := mwServeHandler(t, mw(handler))
	// The cases share the server and run in sequence; each has its own order IDs.
	post := func(t *testing.T, query, key, id string) mwResp {
		t.Helper()
		return mwDo(t, "POST", srv.URL+"/orders"+query, key, []byte(id))
	}

	t.Run("success commits the row and replays", func(t *testing.T) {
		key, before := idemkey.NewV7(), runs.Load()
		first, again := post(t, "", key, "o1"), post(t, "", key, "o1")
		if first.status != 201 || again.status != 201 || string(again.body) != "created o1" ||
			again.header.Get("Location") != "/orders/o1" || again.header.Get(idemhttp.HeaderReplayed) != "true" {
			t.Fatalf("got %d then %d %q %v", first.status, again.status, again.body, again.header)
		}
		if n := count(t, "o1"); n != 1 || runs.Load()-before != 1 {
			t.Errorf("%d rows after %d runs, want 1 and 1", n, runs.Load()-before)
		}
	})
	t.Run("a 5xx not stored rolls back and a retry runs", func(t *testing.T) {
		key, before := idemkey.NewV7(), runs.Load()
		if r := post(t, "?status=500", key, "o2"); r.status != 500 {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		if n := count(t, "o2"); n != 0 {
			t.Errorf("%d rows after a rolled-back 500", n)
		}
		if r := post(t, "?status=500", key, "o2"); r.status != 500 || runs.Load()-before != 2 {
			t.Errorf("retry: %d, %d runs; want the handler run again", r.status, runs.Load()-before)
		}
	})
	t.Run("a panic rolls back and frees the key", func(t *testing.T) {
		key := idemkey.NewV7()
		req, _ := http.NewRequest("POST", srv.URL+"/orders?panic=1", strings.NewReader("o3"))
		req.Header.Set(idemhttp.HeaderKey, key)
		if resp, err := mwFreshConn.Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("a panicking handler answered %d", resp.StatusCode)
		}
		if n := count(t, "o3"); n != 0 {
			t.Errorf("%d rows after a panic", n)
		}
		if r := post(t, "?panic=1", key, "o3"); r.status != 201 || count(t, "o3") != 1 {
			t.Errorf("retry: %d %s, want the key free and the order created once", r.status, r.body)
		}
	})
	t.Run("a response too large to store rolls back", func(t *testing.T) {
		r := post(t, "?big=1", idemkey.NewV7(), "o4")
		mwProblem(t, r, http.StatusInternalServerError, "rolled back")
		if n := count(t, "o4"); n != 0 {
			t.Errorf("%d rows for a response that was not recorded", n)
		}
	})
	t.Run("concurrent duplicates serialize and run once", func(t *testing.T) {
		key, before := idemkey.NewV7(), runs.Load()
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				if r := post(t, "", key, "o5"); r.status != 201 || string(r.body) != "created o5" {
					t.Errorf("got %d %s", r.status, r.body)
				}
			})
		}
		wg.Wait()
		if n := count(t, "o5"); n != 1 || runs.Load()-before != 1 {
			t.Errorf("%d rows after %d runs, want 1 and 1", n, runs.Load()-before)
		}
	})
	t.Run("mismatch", func(t *testing.T) {
		key := idemkey.NewV7()
		post(t, "", key, "o6")
		mwProblem(t, post(t, "", key, "o7"), http.StatusUnprocessableEntity, "different request")
		if n := count(t, "o7"); n != 0 {
			t.Errorf("%d rows for a refused request", n)
		}
	})
}

func TestAtomicMiddlewareConfigErrors(t *testing.T) {
	t.Parallel()
	s := mwSQLite(t)
	db := mwMust(idemsql.SQLDB(context.Background(), s.DB()))(t)
	if _, err := idemhttp.AtomicMiddleware[*sql.Tx](db, nil, idemhttp.Config{}); !errors.Is(err, idem.ErrInvalid) {
		t.Errorf("nil store: %v", err)
	}
	if _, err := idemhttp.AtomicMiddleware(idemsql.TxDB[*sql.Tx]{}, s, idemhttp.Config{}); !errors.Is(err, idem.ErrInvalid) {
		t.Errorf("empty TxDB: %v", err)
	}
	if _, ok := idemhttp.TxFrom[*sql.Tx](context.Background()); ok {
		t.Error("TxFrom found a transaction outside the middleware")
	}
}
