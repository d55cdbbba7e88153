package main

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/cmd/idem/internal/open"
	"github.com/idemhq/idem/cmd/idem/internal/operator"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/internal/testsvc"
)

// keysJSON is the --json document of `idem keys list`.
type keysJSON struct {
	Store   string      `json:"store"`
	Scope   string      `json:"scope"`
	Records []keyRecord `json:"records"`
	Next    string      `json:"next"`
}

// The keys `idem serve --store sqlite:PATH` recorded are listed by `idem keys list`
// under the scope the usage describes: here a lone Authorization header's.
func TestKeysListsWhatServeRecorded(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "gw.db")
	up := newUpstream(t, nil, nil)
	g := startGateway(t, up.URL, "--store", "sqlite:"+path)
	if r := send(t, "POST", "http://"+g.addr+"/orders", "order-1", `{"amount":5}`); r.status != http.StatusCreated {
		t.Fatalf("POST through the gateway = %d", r.status)
	}
	g.stop(t)

	req, _ := http.NewRequest("POST", "/", nil)
	req.Header.Set("Authorization", "Bearer tenant-a") // what send sends
	scope, err := idemhttp.CredentialScope()(req)
	if err != nil || !strings.HasPrefix(scope, "auth:") {
		t.Fatalf("scope of the request = %q, %v", scope, err)
	}
	// keys scope finds it from the caller's headers, in a file.
	headers := filepath.Join(t.TempDir(), "headers")
	if err := os.WriteFile(headers, []byte("Authorization: Bearer tenant-a\nContent-Type: application/json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(mustRun(t, "keys", "scope", "--headers-file", headers)); got != scope {
		t.Fatalf("keys scope = %q, want serve's %q", got, scope)
	}
	// Without the caller's headers, keys scopes says what the gateway recorded.
	var scopes scopesJSON
	decode(t, mustRun(t, "keys", "scopes", "--store", "sqlite:"+path, "--json"), &scopes)
	if len(scopes.Scopes) != 1 || scopes.Scopes[0] != scope || scopes.Next != "" {
		t.Fatalf("keys scopes of the gateway's store: %+v, want [%s]", scopes, scope)
	}
	var page keysJSON
	decode(t, mustRun(t, "keys", "list", "--store", "sqlite:"+path, "--scope", scope, "--json"), &page)
	if len(page.Records) != 1 || page.Records[0].ID != "order-1" || page.Records[0].State != "completed" ||
		page.Records[0].Result.Size == 0 || page.Scope != scope || page.Next != "" {
		t.Fatalf("keys list of the gateway's scope: %+v", page)
	}
	// The stored response holds "\x00\xff" and random bytes: the table escapes them.
	out := mustRun(t, "keys", "get", "--store", "sqlite:"+path, "--scope", scope, "--id", "order-1", "--full")
	noRawControls(t, out)
	if !strings.Contains(out, "completed") || !strings.Contains(out, "full result:") {
		t.Fatalf("keys get --full:\n%s", out)
	}
	// The stored response is read as one: status, headers and body, not hex.
	out = mustRun(t, "keys", "get", "--store", "sqlite:"+path, "--scope", scope, "--id", "order-1")
	noRawControls(t, out)
	wantBody := base64.StdEncoding.EncodeToString([]byte("POST /orders\x00\xff"))[:16]
	for _, want := range []string{"http status  201\n", "http header  Content-Type: application/vnd.test+binary\n",
		"http header  Location: /orders/1\n", "http body    base64:" + wantBody} {
		if !strings.Contains(out, want) {
			t.Fatalf("keys get lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "… (") || !strings.Contains(out, " bytes)\n") {
		t.Fatalf("keys get: the body's preview is not marked cut, with its size:\n%s", out)
	}
	var rec keyRecord
	decode(t, mustRun(t, "keys", "get", "--store", "sqlite:"+path, "--scope", scope, "--id", "order-1", "--json"), &rec)
	if rec.HTTP == nil || rec.HTTP.Status != 201 || rec.HTTP.ContentType != "application/vnd.test+binary" ||
		rec.HTTP.Body.Encoding != "base64" || rec.HTTP.Body.Size != int64(len("POST /orders\x00\xff")+64+len(`{"amount":5}`)) ||
		rec.Result.Encoding != "hex" {
		t.Fatalf("keys get --json: %+v %+v", rec.HTTP, rec.Result)
	}
	out = mustRun(t, "keys", "list", "--store", "sqlite:"+path, "--scope", scope)
	if !strings.Contains(out, "HTTP 201 application/vnd.test+binary base64:"+wantBody) {
		t.Fatalf("keys list shows no decoded response:\n%s", out)
	}
	if out = mustRun(t, "keys", "list", "--store", "sqlite:"+path, "--scope", "anonymous"); !strings.Contains(out, "0 records of scope anonymous") {
		t.Fatalf("keys list of another scope:\n%s", out)
	}
}

// keys scope computes the scope as serve does under each of its scope flags, and
// keeps a malformed line (which may hold a credential) out of its message.
func TestKeysScope(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	req := func(h map[string]string) *http.Request {
		r, _ := http.NewRequest("POST", "/", nil)
		for k, v := range h {
			r.Header.Set(k, v)
		}
		return r
	}
	tenant := file("tenant", "X-Tenant: acme\nX-Api-Key: k-123\n")
	want, _ := idemhttp.TenantScope("X-Tenant", idemhttp.CookieCredentialScope(nil, "X-Api-Key"))(req(map[string]string{"X-Tenant": "acme", "X-Api-Key": "k-123"}))
	if got := strings.TrimSpace(mustRun(t, "keys", "scope", "--headers-file", tenant, "--scope-header", "X-Tenant")); got != want || !strings.HasPrefix(got, "tenant:acme/cred:") {
		t.Fatalf("keys scope --scope-header X-Tenant = %q, want %q", got, want)
	}
	if got := strings.TrimSpace(mustRun(t, "keys", "scope", "--headers-file", tenant, "--scope-header", "X-Tenant", "--trust-scope-header")); got != "tenant:acme" {
		t.Fatalf("keys scope --trust-scope-header = %q", got)
	}
	if got := strings.TrimSpace(mustRun(t, "keys", "scope", "--headers-file", file("none", "Accept: */*\n"))); got != "anonymous" {
		t.Fatalf("keys scope without credentials = %q", got)
	}
	wantCode(t, 2, "--headers-file is required", "keys", "scope")
	_, stderr, code := runCode(t, "keys", "scope", "--headers-file", file("bad", "Bearer s3cr3t-token\n"))
	if code != 2 || strings.Contains(stderr, "s3cr3t") || !strings.Contains(stderr, "not a header") {
		t.Fatalf("keys scope of a malformed file exited %d: %q", code, stderr)
	}
	wantCode(t, 2, "--trust-scope-header needs --scope-header", "keys", "scope", "--headers-file", tenant, "--trust-scope-header")
}

// keys changes no schema: on a database without the records table it says so.
func TestKeysCreatesNoTable(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "other.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil { // an empty SQLite database
		t.Fatal(err)
	}
	wantCode(t, 1, "idem migrate", "keys", "list", "--store", "sqlite:"+path, "--scope", "anonymous")
	db, err := open.SQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var tables int
	if err := db.QueryRow("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'").Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("keys list created %d tables (%v), want none", tables, err)
	}
}

// keysStore is a store of one backend, opened through its package, and the --store
// URL of `idem keys` for it.
type keysStore struct {
	url   string
	store idem.Store
}

func newKeysStore(t *testing.T, name string) keysStore {
	t.Helper()
	ctx := context.Background()
	switch name {
	case "sqlite":
		path := filepath.Join(t.TempDir(), "gw.db")
		s, err := idemsqlite.Open(ctx, path, idemsqlite.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return keysStore{"sqlite:" + path, s}
	case "postgres":
		cs, _ := testsvc.PostgresSchema(t)
		pool, err := pgxpool.New(ctx, cs)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		s, err := idempg.New(ctx, pool, idempg.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return keysStore{cs, s}
	case "mysql":
		raw := testsvc.MySQLDatabase(t)
		s, err := idemmysql.Open(ctx, raw, idemmysql.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return keysStore{raw, s}
	case "redis":
		// A redis-server of this test binary's own: listing pages with SCAN, whose
		// page count grows with the whole keyspace, and the shared Redis holds
		// whatever the other test binaries write meanwhile (TestKeysScopes ran out
		// of its 1,000 pages there).
		addr := testsvc.PrivateRedis(t)
		prefix := testsvc.UniqueName("idemtest:keys:") + ":"
		client := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { client.Close() })
		s, err := idemredis.New(client, idemredis.Config{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return keysStore{"redis://" + addr + "/0?prefix=" + url.QueryEscape(prefix), s}
	}
	t.Fatalf("no store %q", name)
	return keysStore{}
}

// get, list and evict on every store, with their exit codes: 3 for a key with no
// record, 4 for evicting an in-progress key without --force.
func TestKeysGetListEvict(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"sqlite", "postgres", "mysql", "redis"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ks := newKeysStore(t, name)
			done := idem.Key{Scope: "tenant:acme", ID: "k-done"}
			busy := idem.Key{Scope: "tenant:acme", ID: "k-busy"}
			res, err := ks.store.Claim(ctx, idem.Claim{Key: done, Fingerprint: []byte{1, 2}, Lease: time.Minute, Retention: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			// A result meant to repaint a terminal: it must reach it escaped.
			if err := ks.store.Complete(ctx, done, res.Token, []byte("\x1b[2J\x1b[31mok\r\n")); err != nil {
				t.Fatal(err)
			}
			held, err := ks.store.Claim(ctx, idem.Claim{Key: busy, Lease: time.Minute, Retention: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			store := []string{"--store", ks.url, "--scope", "tenant:acme"}
			keys := func(action string, args ...string) []string {
				return append(append([]string{"keys", action}, store...), args...)
			}

			// list, as JSON and paged when the store pages in order (Redis's SCAN
			// pages are neither ordered nor of a set size).
			// A SCAN page may stop short of the limit, so follow the cursor to the end.
			var page keysJSON
			decode(t, mustRun(t, keys("list", "--json")...), &page)
			got := map[string]keyRecord{}
			for pages := 0; ; pages++ {
				for _, r := range page.Records {
					got[r.ID] = r
				}
				if page.Next == "" || pages > 100 {
					break
				}
				next := page.Next
				page = keysJSON{}
				decode(t, mustRun(t, keys("list", "--json", "--cursor", next)...), &page)
			}
			if len(got) != 2 || got["k-done"].State != "completed" || got["k-busy"].State != "in_progress" ||
				got["k-done"].Fingerprint != "0102" || got["k-done"].Result.Size != 13 || got["k-done"].Result.Encoding != "hex" ||
				got["k-done"].Result.Full != nil || got["k-busy"].Token == "" || got["k-done"].Expired || page.Scope != "tenant:acme" {
				t.Fatalf("keys list --json: %+v", page)
			}
			if strings.Contains(page.Store, "@") {
				t.Fatalf("store %q", page.Store)
			}
			if name != "redis" {
				decode(t, mustRun(t, keys("list", "--json", "--limit", "1")...), &page)
				if len(page.Records) != 1 || page.Records[0].ID != "k-busy" || page.Next == "" {
					t.Fatalf("first page of 1: %+v", page)
				}
				out := mustRun(t, keys("list", "--limit", "1", "--cursor", page.Next)...)
				if !strings.Contains(out, "k-done") || strings.Contains(out, "k-busy") {
					t.Fatalf("second page:\n%s", out)
				}
			}
			out := mustRun(t, keys("list")...)
			for pages, last := 0, out; pages < 100; pages++ { // SCAN pages may stop short: the next ones too
				_, more, ok := strings.Cut(last, "more: --cursor ")
				if !ok {
					break
				}
				more, _, _ = strings.Cut(more, "\n")
				last = mustRun(t, keys("list", "--cursor", strings.TrimSpace(more))...)
				out += last
			}
			noRawControls(t, out)
			if !strings.Contains(out, `hex:1b5b324a1b5b33316d6f6b0d0a (13 bytes)`) || !strings.Contains(out, "in_progress") {
				t.Fatalf("keys list table:\n%s", out)
			}

			// get
			var rec keyRecord
			decode(t, mustRun(t, keys("get", "--id", "k-done", "--json", "--full")...), &rec)
			if rec.ID != "k-done" || string(rec.Result.Full) != "\x1b[2J\x1b[31mok\r\n" || rec.CreatedAt.IsZero() && name != "redis" {
				t.Fatalf("keys get --json --full: %+v", rec)
			}
			wantCode(t, operator.ExitNotFound, "no record for key", keys("get", "--id", "k-none")...)

			// evict: in progress without --force is a conflict, and leaves it there.
			wantCode(t, operator.ExitConflict, "pass --force", keys("evict", "--id", "k-busy", "--reason", "stuck")...)
			decode(t, mustRun(t, keys("get", "--id", "k-busy", "--json")...), &rec)
			if rec.State != "in_progress" {
				t.Fatalf("after a refused eviction: %+v", rec)
			}
			var ev struct {
				Evicted keyRecord `json:"evicted"`
				Forced  bool      `json:"forced"`
				Reason  string    `json:"reason"`
			}
			decode(t, mustRun(t, keys("evict", "--id", "k-busy", "--force", "--reason", "holder crashed", "--json")...), &ev)
			if !ev.Forced || ev.Reason != "holder crashed" || ev.Evicted.State != "in_progress" || ev.Evicted.ID != "k-busy" {
				t.Fatalf("keys evict --force --json: %+v", ev)
			}
			wantCode(t, operator.ExitNotFound, "no record for key", keys("get", "--id", "k-busy")...)
			if err := ks.store.Complete(ctx, busy, held.Token, []byte("late")); err == nil {
				t.Fatal("the evicted holder's Complete succeeded: it was not fenced out")
			}
			out = mustRun(t, keys("evict", "--id", "k-done", "--reason", "customer asked for a rerun")...)
			if !strings.Contains(out, "evicted key scope=tenant:acme id=k-done") || !strings.Contains(out, "customer asked for a rerun") {
				t.Fatalf("keys evict:\n%s", out)
			}
			wantCode(t, operator.ExitNotFound, "nothing evicted", keys("evict", "--id", "k-done", "--reason", "again")...)
		})
	}
}
