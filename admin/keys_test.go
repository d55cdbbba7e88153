package admin_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
)

func TestKeysList(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for i := range 5 {
		b.ins.put(idem.Record{Key: idem.Key{Scope: "t1", ID: fmt.Sprintf("k%d", i)}, State: idem.StateCompleted, Token: uint64(i + 1)})
	}
	b.ins.put(idem.Record{Key: idem.Key{Scope: "t2", ID: "other"}, State: idem.StateCompleted})

	var stores struct{ Stores []string }
	wantJSON(t, b.do(t, "GET", "/api/stores", readToken, ""), &stores)
	if len(stores.Stores) != 1 || stores.Stores[0] != "main" {
		t.Fatalf("stores %v", stores.Stores)
	}
	var ids []string
	cursor := ""
	for range 4 {
		var page admin.KeyPage
		wantJSON(t, b.do(t, "GET", "/api/keys?store=main&scope=t1&limit=2&cursor="+url.QueryEscape(cursor), readToken, ""), &page)
		for _, r := range page.Records {
			ids = append(ids, r.ID)
			if r.Scope != "t1" || r.Store != "main" || r.State != "completed" {
				t.Errorf("record %+v", r)
			}
		}
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	if strings.Join(ids, ",") != "k0,k1,k2,k3,k4" {
		t.Fatalf("paged ids %v", ids)
	}

	for target, field := range map[string]string{
		"/api/keys?scope=t1&limit=0":    "limit",
		"/api/keys?scope=t1&limit=1001": "limit",
		"/api/keys?scope=t1&limit=x":    "limit",
		"/api/keys?limit=5":             "scope is empty",
		"/api/keys?scope=t1&scope=t2":   "scope is given 2 times",
		"/api/keys?scope=t1&cursor=" + strings.Repeat("c", admin.MaxCursorLen+1): "cursor is longer",
		"/api/keys?scope=%ZZ": "query",
	} {
		wantProblem(t, b.do(t, "GET", target, readToken, ""), 400, admin.ProblemInvalid, field)
	}
	wantProblem(t, b.do(t, "GET", "/api/keys?store=nope&scope=t1", readToken, ""), 404, admin.ProblemNotFound, `"nope"`)
}

func TestKeysStoreRequiredWithSeveral(t *testing.T) {
	t.Parallel()
	other := &fakeInspector{recs: map[idem.Key]idem.Record{}}
	b := setup(t, func(c *admin.Config) { c.Stores["other"] = other })
	wantProblem(t, b.do(t, "GET", "/api/keys?scope=t1", readToken, ""), 400, admin.ProblemInvalid, "store is empty and 2 stores")
	other.put(idem.Record{Key: idem.Key{Scope: "t1", ID: "x"}, State: idem.StateCompleted})
	var page admin.KeyPage
	wantJSON(t, b.do(t, "GET", "/api/keys?store=other&scope=t1", readToken, ""), &page)
	if len(page.Records) != 1 || page.Store != "other" {
		t.Fatalf("page %+v", page)
	}
}

func TestKeyInspect(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	past, future := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	long := strings.Repeat("é", 40) // 80 bytes of printable UTF-8: the cut falls inside a rune
	bin := append([]byte{0xde, 0xad, 0xbe, 0xef}, make([]byte, 100)...)
	b.ins.put(idem.Record{Key: idem.Key{Scope: "t1", ID: "done"}, State: idem.StateCompleted, Fingerprint: []byte{0xab, 0xcd},
		Token: 1<<63 + 1, Result: []byte(`{"ok":true}`), CreatedAt: past, ExpiresAt: future})
	b.ins.put(idem.Record{Key: idem.Key{Scope: "t1", ID: "expired"}, State: idem.StateInProgress, Token: 3, ExpiresAt: past})
	b.ins.put(idem.Record{Key: idem.Key{Scope: "t1", ID: "long"}, State: idem.StateCompleted, Result: []byte(long)})
	b.ins.put(idem.Record{Key: idem.Key{Scope: "t1", ID: "bin"}, State: idem.StateCompleted, Result: bin})
	b.ins.put(idem.Record{Key: idem.Key{Scope: "t1", ID: "ctl"}, State: idem.StateCompleted, Result: []byte("a\x1b[31mred")})

	get := func(id string, token string, full bool) admin.KeyRecord {
		t.Helper()
		target := "/api/key?scope=t1&id=" + id
		if full {
			target += "&full=1"
		}
		var rec admin.KeyRecord
		wantJSON(t, b.do(t, "GET", target, token, ""), &rec)
		return rec
	}
	rec := get("done", readToken, false)
	if rec.State != "completed" || rec.Expired || rec.Fingerprint != "abcd" || rec.Token != "9223372036854775809" ||
		!reflect.DeepEqual(rec.Result, admin.Preview{Size: 11, Encoding: "text", Preview: `{"ok":true}`}) || rec.CreatedAt.IsZero() {
		t.Errorf("done: %+v", rec)
	}
	if rec := get("expired", readToken, false); rec.State != "in_progress" || !rec.Expired {
		t.Errorf("expired: %+v", rec)
	}
	rec = get("long", readToken, false)
	if rec.Result.Encoding != "text" || !rec.Result.Truncated || rec.Result.Size != 80 ||
		rec.Result.Preview != strings.Repeat("é", 32) || rec.Result.Full != nil {
		t.Errorf("long: %+v", rec.Result)
	}
	rec = get("bin", readToken, false)
	if rec.Result.Encoding != "hex" || !rec.Result.Truncated || rec.Result.Size != 104 ||
		rec.Result.Preview != "deadbeef"+strings.Repeat("00", 60) {
		t.Errorf("bin: %+v", rec.Result)
	}
	if rec := get("ctl", readToken, false); rec.Result.Encoding != "hex" || rec.Result.Truncated {
		t.Errorf("a terminal escape is shown as text: %+v", rec.Result)
	}
	rec = get("bin", fullToken, true)
	if string(rec.Result.Full) != string(bin) {
		t.Errorf("full: %d bytes, want %d", len(rec.Result.Full), len(bin))
	}
	raw := b.do(t, "GET", "/api/key?scope=t1&id=bin&full=1", fullToken, "").Body.String()
	if !strings.Contains(raw, base64.StdEncoding.EncodeToString(bin)) {
		t.Errorf("full result is not base64 in %s", raw)
	}
}

func TestKeyErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	wantProblem(t, b.do(t, "GET", "/api/key?scope=tenant-9&id=order-77", readToken, ""), 404, admin.ProblemNotFound,
		`scope="tenant-9"`, `id="order-77"`, `"main"`)
	for target, detail := range map[string]string{
		"/api/key?scope=t1": "id is empty",
		"/api/key?id=k":     "scope is empty",
		"/api/key?scope=t1&id=" + strings.Repeat("k", 256): "id is longer than 255 bytes",
		"/api/key?scope=t%01&id=k":                         "scope has a control character",
		"/api/key?scope=t1&id=%FF":                         "id is not valid UTF-8",
		"/api/key?scope=t1&id=k&full=2":                    "full",
	} {
		wantProblem(t, b.do(t, "GET", target, readToken, ""), 400, admin.ProblemInvalid, detail)
	}
}

// TestErrorMapping: backend failures map to 503, deadlines to 504, anything else
// to 500 whose detail does not leak the error, which is logged instead.
func TestErrorMapping(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err    error
		status int
		typ    string
	}{
		{&idem.BackendError{Backend: "postgres", Op: "inspect", Err: errors.New("conn refused to secret-host")}, 503, admin.ProblemUnavailable},
		{fmt.Errorf("list: %w", context.DeadlineExceeded), 504, admin.ProblemTimeout},
		{errors.New("password=hunter2 leaked"), 500, admin.ProblemInternal},
		{context.Canceled, 503, admin.ProblemUnavailable},
		{&idem.InputError{Field: "cursor", Reason: "is not a cursor of this store", Fix: "start over"}, 400, admin.ProblemInvalid},
	} {
		b := setup(t, nil)
		b.ins.err = tc.err
		w := b.do(t, "GET", "/api/keys?scope=t1", readToken, "")
		p := wantProblem(t, w, tc.status, tc.typ)
		if strings.Contains(p.Detail, "secret-host") || strings.Contains(p.Detail, "hunter2") {
			t.Errorf("detail leaks the error: %s", p.Detail)
		}
		if logged := strings.Contains(b.logs.String(), "request failed"); logged != (tc.status >= 500 && tc.err != context.Canceled) {
			t.Errorf("%v: logged %v: %s", tc.err, logged, b.logs)
		}
		if tc.status == 500 && !strings.Contains(b.logs.String(), "hunter2") {
			t.Errorf("the internal error is not logged: %s", b.logs)
		}
	}
}

func TestEvict(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.ins.put(idem.Record{Key: idem.Key{Scope: "t1", ID: "run"}, State: idem.StateInProgress, Token: 9, Result: nil})
	b.ins.put(idem.Record{Key: idem.Key{Scope: "t1", ID: "done"}, State: idem.StateCompleted, Token: 4, Result: []byte("secret-result")})

	wantProblem(t, b.do(t, "POST", "/api/keys/evict", fullToken, `{"scope":"t1","id":"run","reason":"stuck"}`),
		409, admin.ProblemConflict, "force", `id="run"`)
	var rec admin.KeyRecord
	wantJSON(t, b.do(t, "POST", "/api/keys/evict", fullToken, `{"scope":"t1","id":"run","force":true,"reason":"stuck"}`), &rec)
	if rec.ID != "run" || rec.State != "in_progress" || rec.Token != "9" {
		t.Errorf("evicted %+v", rec)
	}
	wantJSON(t, b.do(t, "POST", "/api/keys/evict", fullToken, `{"store":"main","scope":"t1","id":"done","reason":"bad result"}`), &rec)
	if rec.Result.Full != nil {
		t.Error("evict returned the full result")
	}
	wantProblem(t, b.do(t, "GET", "/api/key?scope=t1&id=done", readToken, ""), 404, admin.ProblemNotFound)
	wantProblem(t, b.do(t, "POST", "/api/keys/evict", fullToken, `{"scope":"t1","id":"done","reason":"again"}`),
		404, admin.ProblemNotFound, `scope="t1"`, `id="done"`)
	wantProblem(t, b.do(t, "POST", "/api/keys/evict", fullToken, `{"scope":"","id":"x","reason":"r"}`),
		400, admin.ProblemInvalid, "scope is empty")
}

// TestAuditRecord: each mutation, allowed or refused, logs one record naming who,
// what, why and the outcome, and neither tokens nor results appear in the log.
func TestAuditRecord(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.ins.put(idem.Record{Key: idem.Key{Scope: "t1", ID: "k1"}, State: idem.StateCompleted, Result: []byte("result-bytes-xyz")})
	r := authed("POST", "/api/keys/evict", fullToken)
	r.Body = bodyOf(`{"scope":"t1","id":"k1","force":true,"reason":"customer asked, ticket 42"}`)
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-Idem-Actor", "alice\n"+strings.Repeat("a", 300))
	r.RemoteAddr = "192.0.2.7:5555"
	wantJSON(t, b.serve(r), &admin.KeyRecord{})
	b.do(t, "POST", "/api/keys/evict", readToken, `{"scope":"t1","id":"k2","reason":"try"}`)
	b.do(t, "POST", "/api/keys/evict", "", `{"scope":"t1","id":"k3","reason":"try"}`)
	b.do(t, "GET", "/api/key?scope=t1&id=k1", readToken, "") // reads are not audited

	recs := b.auditRecords(t)
	if len(recs) != 3 {
		t.Fatalf("%d audit records, want 3: %s", len(recs), b.logs)
	}
	a := recs[0]
	who, what := a["who"].(map[string]any), a["what"].(map[string]any)
	if a["route"] != "POST /api/keys/evict" || a["why"] != "customer asked, ticket 42" || a["outcome"] != "ok" || a["status"] != 200.0 ||
		who["access"] != "full" || who["remote"] != "192.0.2.7:5555" || what["scope"] != "t1" || what["id"] != "k1" || what["force"] != true {
		t.Errorf("audit record %v", a)
	}
	if actor := who["actor"].(string); len(actor) > 128 || !strings.HasPrefix(actor, "alice?") {
		t.Errorf("actor %q: not cleaned or capped", actor)
	}
	if who := recs[1]["who"].(map[string]any); who["access"] != "read" || recs[1]["outcome"] != admin.ProblemForbidden {
		t.Errorf("refused read-token mutation: %v", recs[1])
	}
	if who := recs[2]["who"].(map[string]any); who["access"] != "unauthenticated" || recs[2]["status"] != 401.0 {
		t.Errorf("unauthenticated mutation: %v", recs[2])
	}
	for _, secret := range []string{fullToken, readToken, "result-bytes-xyz"} {
		if strings.Contains(b.logs.String(), secret) {
			t.Errorf("the log contains %q", secret)
		}
	}
}
