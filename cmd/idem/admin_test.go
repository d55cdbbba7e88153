package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/idemnats/natsserver"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
)

const (
	testAdminToken = "admin-token-0123456789abcdef"
	testReadToken  = "read-token-0123456789abcdef"
)

var adminListeningRE = regexp.MustCompile(`idem admin: listening on (\S+)`)

// apiGet GETs url with token ("" for none) and returns the status and body.
func apiGet(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// keyIDs returns the ids of a GET /api/keys answer.
func keyIDs(t *testing.T, body string) []string {
	t.Helper()
	var page struct{ Records []struct{ ID string } }
	if err := json.Unmarshal([]byte(body), &page); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	var ids []string
	for _, r := range page.Records {
		ids = append(ids, r.ID)
	}
	return ids
}

// keyedUpstream answers every request 201.
func keyedUpstream(t *testing.T) string {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "created")
	}))
	t.Cleanup(up.Close)
	return up.URL
}

func postKeyed(t *testing.T, url, key string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"n":1}`))
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST with key %s: %d", key, resp.StatusCode)
	}
}

// `idem serve --admin-token` answers /api/ on its admin port, and `idem admin` on
// the same SQLite file lists the keys the gateway recorded; both refuse requests
// without the token.
func TestAdminServeAndDaemonSQLite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "gw.db")
	g := startGateway(t, keyedUpstream(t), "--store", "sqlite:"+path, "--admin-token", testAdminToken)
	postKeyed(t, "http://"+g.addr+"/orders", "order-1")
	postKeyed(t, "http://"+g.addr+"/orders", "order-2")

	code, body := apiGet(t, "http://"+g.admin+"/api/keys?scope=anonymous", testAdminToken)
	if code != 200 || strings.Join(keyIDs(t, body), ",") != "order-1,order-2" {
		t.Fatalf("serve's /api/keys: %d %s", code, body)
	}
	if code, body := apiGet(t, "http://"+g.admin+"/api/keys?scope=anonymous", ""); code != 401 {
		t.Fatalf("serve's /api/keys without the token: %d %s", code, body)
	}
	if code, _ := apiGet(t, "http://"+g.admin+"/healthz", ""); code != 200 {
		t.Fatalf("serve's /healthz: %d", code)
	}

	d, addrs := startDaemon(t, adminListeningRE, "admin", "--listen", "127.0.0.1:0", "--store", "gw=sqlite:"+path,
		"--db", "sqlite:"+path, "--token", testAdminToken, "--read-token", testReadToken)
	base := "http://" + addrs[0]
	code, body = apiGet(t, base+"/api/keys?store=gw&scope=anonymous", testReadToken)
	if code != 200 || strings.Join(keyIDs(t, body), ",") != "order-1,order-2" {
		t.Fatalf("idem admin's /api/keys: %d %s", code, body)
	}
	if code, _ := apiGet(t, base+"/api/keys?store=gw&scope=anonymous", ""); code != 401 {
		t.Fatalf("idem admin without the token: %d", code)
	}
	if code, _ := apiGet(t, base+"/api/keys?store=gw&scope=anonymous", "wrong-token-0123456789abcdef"); code != 401 {
		t.Fatalf("idem admin with a wrong token: %d", code)
	}
	// The gateway's file has no outbox, inbox or sagas: those areas are off.
	code, body = apiGet(t, base+"/api/", testAdminToken)
	var index struct{ Areas map[string]bool }
	if err := json.Unmarshal([]byte(body), &index); err != nil || code != 200 || !index.Areas["keys"] || index.Areas["outbox"] {
		t.Fatalf("index: %d %s", code, body)
	}
	if code, body := apiGet(t, base+"/healthz", ""); code != 200 {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	if code, body := apiGet(t, base+"/metrics", ""); code != 200 || !strings.Contains(body, "idem_admin_requests_total") {
		t.Fatalf("/metrics: %d", code)
	}
	d.stop(t)
	if out := d.stderr.String(); strings.Contains(out, testAdminToken) || strings.Contains(out, testReadToken) {
		t.Fatalf("a token was printed:\n%s", out)
	}
}

// `idem admin --store postgres://…` lists the keys a store claimed in that schema.
func TestAdminDaemonPostgres(t *testing.T) {
	t.Parallel()
	conn, _ := testsvc.PostgresSchema(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st, err := idempg.New(ctx, pool, idempg.Config{})
	if err != nil {
		t.Fatal(err)
	}
	k := idem.Key{Scope: "payments", ID: "p-1"}
	res, err := st.Claim(ctx, idem.Claim{Key: k, Lease: time.Minute})
	if err != nil || res.Outcome != idem.Acquired {
		t.Fatalf("claim: %v %v", res.Outcome, err)
	}
	if err := st.Complete(ctx, k, res.Token, []byte("ok")); err != nil {
		t.Fatal(err)
	}
	// The schema holds an outbox too, with one message waiting.
	ob, err := outbox.New(ctx, idempg.TxDB(pool), outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	err = idempg.TxDB(pool).InTx(ctx, func(tx pgx.Tx) error {
		_, err := ob.EnqueueTx(ctx, tx, idem.Message{ID: "m-1", Topic: "payments", Payload: []byte("x")})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	d, addrs := startDaemon(t, adminListeningRE, "admin", "--listen", "127.0.0.1:0", "--store", conn,
		"--db", conn, "--token", testAdminToken)
	base := "http://" + addrs[0]
	code, body := apiGet(t, base+"/api/keys?scope=payments", testAdminToken)
	if code != 200 || strings.Join(keyIDs(t, body), ",") != "p-1" {
		t.Fatalf("/api/keys: %d %s", code, body)
	}
	if code, _ := apiGet(t, base+"/api/keys?scope=payments", ""); code != 401 {
		t.Fatalf("without the token: %d", code)
	}
	code, body = apiGet(t, base+"/api/outbox", testAdminToken)
	if code != 200 || !strings.Contains(body, `"topic":"payments"`) || !strings.Contains(body, `"backlog":1`) {
		t.Fatalf("/api/outbox: %d %s", code, body)
	}
	if code, _ := apiGet(t, base+"/api/sagas", testAdminToken); code != 404 {
		t.Fatalf("/api/sagas on a schema without sagas: %d, want 404 not configured", code)
	}
	d.stop(t)
	if strings.Contains(d.stderr.String(), testAdminToken) {
		t.Fatalf("the token was printed:\n%s", d.stderr)
	}
}

// idem admin refuses to serve without a token on all interfaces, and without
// --insecure on loopback; it never echoes a token it refuses.
func TestAdminRefusals(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys.db")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "0.0.0.0:0", "--insecure"}, "not a loopback address"},
		{[]string{"--listen", "127.0.0.1:0"}, "--insecure"},
		{[]string{"--listen", "127.0.0.1:0", "--token", "short-secret"}, "--token is shorter than 16 bytes"},
		{[]string{"--listen", "127.0.0.1:0", "--token", testAdminToken, "--read-token", testAdminToken}, "--read-token equals"},
		{[]string{"--listen", "127.0.0.1:0", "--token", testAdminToken, "--store", "m=memory:"}, "memory store"},
	} {
		var stderr strings.Builder
		args := append([]string{"admin", "--store", "sqlite:" + path}, c.args...)
		err := (&Main{Stdout: io.Discard, Stderr: &stderr}).run(context.Background(), args)
		if !errors.Is(err, cli.ErrUsage) || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("idem %v: %v, stderr %q, want usage error with %q", args, err, stderr.String(), c.want)
		}
		if strings.Contains(stderr.String(), "short-secret") || strings.Contains(stderr.String(), testAdminToken) {
			t.Errorf("idem %v printed a token: %s", args, stderr.String())
		}
	}
	// Without a token, loopback and --insecure: served.
	d, addrs := startDaemon(t, adminListeningRE, "admin", "--listen", "127.0.0.1:0", "--insecure", "--store", "sqlite:"+path)
	if code, body := apiGet(t, "http://"+addrs[0]+"/api/stores", ""); code != 200 || !strings.Contains(body, "default") {
		t.Fatalf("insecure /api/stores: %d %s", code, body)
	}
	d.stop(t)
}

// `idem serve --admin-token short` is refused before anything connects.
func TestServeAdminTokenChecked(t *testing.T) {
	t.Parallel()
	var stderr strings.Builder
	err := (&Main{Stdout: io.Discard, Stderr: &stderr}).run(context.Background(),
		[]string{"serve", "--upstream", "http://127.0.0.1:1", "--store", "memory:", "--admin-token", "short-secret"})
	if !errors.Is(err, cli.ErrUsage) || !strings.Contains(stderr.String(), "--admin-token is shorter") || strings.Contains(stderr.String(), "short-secret") {
		t.Fatalf("%v: %s", err, stderr.String())
	}
}

// `idem relay --admin-token` serves the outbox area at /api/ of --listen: a
// message the relay parked is listed there, and not without the token.
func TestRelayAdminAPI(t *testing.T) {
	t.Parallel()
	srv, err := natsserver.StartServer(natsserver.ServerConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("StartServer: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	// No stream holds this subject: every publication fails, and one failure parks.
	path, _, enqueue := sqliteOutbox(t, testsvc.UniqueName("nostream.")+".orders")
	enqueue("lost")
	r := startRelay(t, "--db", "sqlite:"+path, "--sink", srv.ClientURL(), "--poll", "50ms", "--max-attempts", "1",
		"--admin-token", testAdminToken)
	base := "http://" + r.addr
	var body string
	testsvc.Eventually(t, time.Minute, "the message is parked and listed", func() bool {
		var code int
		code, body = apiGet(t, base+"/api/outbox/parked", testAdminToken)
		return code == 200 && strings.Contains(body, `"message_id":"lost"`)
	})
	if code, _ := apiGet(t, base+"/api/outbox/parked", ""); code != 401 {
		t.Fatalf("/api/outbox/parked without the token: %d", code)
	}
	if code, _ := apiGet(t, base+"/metrics", ""); code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	r.stop(t)
}

// With --admin-token, serve's memory store keeps its keys' text, so the API lists them.
func TestServeAdminMemoryStore(t *testing.T) {
	t.Parallel()
	g := startGateway(t, keyedUpstream(t), "--store", "memory:", "--admin-token", testAdminToken)
	postKeyed(t, "http://"+g.addr+"/orders", "mem-1")
	code, body := apiGet(t, "http://"+g.admin+"/api/keys?scope=anonymous", testAdminToken)
	if code != 200 || strings.Join(keyIDs(t, body), ",") != "mem-1" {
		t.Fatalf("/api/keys: %d %s", code, body)
	}
	g.stop(t)
}
