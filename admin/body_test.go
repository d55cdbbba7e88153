package admin_test

import (
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
)

// TestStrictBody: a mutation's body names each field exactly once, as the API
// spells it: "FORCE":true is not force (encoding/json alone would honour it and
// evict the held key), a field given twice is refused (encoding/json alone would
// take the last), and so are unknown names and deep nesting; the problem names the
// field and the fix.
func TestStrictBody(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	held := idem.Key{Scope: "t1", ID: "held"}
	b.ins.put(idem.Record{Key: held, State: idem.StateInProgress})
	for _, tc := range []struct{ body, detail, fix string }{
		{`{"scope":"t1","id":"held","reason":"r","FORCE":true}`, `body field "FORCE" is not a field of this request`, `use "force"`},
		{`{"scope":"t1","id":"held","reason":"r","Force":true}`, `body field "Force"`, `use "force"`},
		{`{"scope":"t1","id":"held","reason":"r","force":false,"force":true}`, `body field "force" is given twice`, "give each field once"},
		{`{"scope":"t1","id":"held","reason":"r","reason":"other"}`, `body field "reason" is given twice`, ""},
		{`{"scope":"t1","ID":"held","reason":"r"}`, `body field "ID"`, `use "id"`},
		{`{"scope":"t1","id":"held","reason":"r","forse":true}`, `body field "forse" is not a field of this request`, "use store, scope, id, force, reason"},
		{`{"scope":"t1","id":"held","reason":"r","x":{"a":1,"a":2}}`, `body field "x"`, ""},
		{`{"scope":"t1","id":"held","reason":"r"`, "body is not valid JSON", ""},
		{`"text"`, "body is not a JSON object", ""},
	} {
		wantProblem(t, b.do(t, "POST", "/api/keys/evict", fullToken, tc.body), 400, admin.ProblemInvalid, tc.detail, tc.fix)
	}
	if !b.ins.has(held) {
		t.Fatal("a refused body evicted the held key")
	}
	// An escaped name is the name it spells, as encoding/json reads it.
	wantJSON(t, b.do(t, "POST", "/api/keys/evict", fullToken, `{"scope":"t1","id":"held","re\u0061son":"r","force":true}`), &admin.KeyRecord{})
	if b.ins.has(held) {
		t.Fatal("the held key was not evicted")
	}

	// Every mutation reads its body through the same checks.
	for _, tc := range []struct{ path, body, field string }{
		{"/api/deadletters/replay", `{"ids":[1],"reason":"r","IDS":[2]}`, `"IDS"`},
		{"/api/deadletters/replay", `{"ids":[1],"ids":[2],"reason":"r"}`, `"ids" is given twice`},
		{"/api/deadletters/replay", `{"ids":[[[[[[[[[1]]]]]]]]],"reason":"r"}`, "nests deeper than 8 levels"},
		{"/api/deadletters/1/discard", `{"reason":"r","Reason":"s"}`, `"Reason"`},
		{"/api/outbox/parked/7/retry", `{"reason":"r","reason":"s"}`, `"reason" is given twice`},
		{"/api/outbox/parked/7/discard", `{"REASON":"r"}`, `use "reason"`},
		{"/api/sagas/s1/retry", `{"reason":"r","note":"n"}`, `"note" is not a field`},
		{"/api/sagas/s1/resolve", `{"note":"n","Note":"m"}`, `use "note"`},
	} {
		wantProblem(t, b.do(t, "POST", tc.path, fullToken, tc.body), 400, admin.ProblemInvalid, tc.field)
	}
}

// FuzzStrictBody sends arbitrary bodies to a mutation: every answer is a problem
// or a success, never a 500; a body that is not refused 400 is one JSON object
// whose names are exactly the request's fields.
func FuzzStrictBody(f *testing.F) {
	for _, s := range []string{
		`{"scope":"t1","id":"k1","reason":"r"}`, `{"scope":"t1","id":"k1","reason":"r","force":true}`,
		`{"scope":"t1","id":"k1","reason":"r","FORCE":true}`, `{"reason":"a","reason":"b"}`, `{"x":{"y":[1,{"z":2,"z":3}]}}`,
		`{"scope":"t1","id":"k1","re\u0061son":"r"}`, `[` + strings.Repeat("[", 100), `{} {}`, ``, `null`, "{\"\xff\":1}",
	} {
		f.Add(s)
	}
	b := setup(f, nil)
	fields := []string{"store", "scope", "id", "force", "reason"}
	f.Fuzz(func(t *testing.T, body string) {
		b.ins.put(idem.Record{Key: idem.Key{Scope: "t1", ID: "k1"}, State: idem.StateCompleted})
		r := httptest.NewRequest("POST", "/api/keys/evict", strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+fullToken)
		r.Header.Set("Content-Type", "application/json")
		w := b.serve(r)
		switch {
		case w.Code >= 500:
			t.Fatalf("body %q: status %d: %s", body, w.Code, w.Body)
		case w.Code == 400:
			return
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal([]byte(body), &obj); err != nil {
			t.Fatalf("body %q accepted (%d): %v", body, w.Code, err)
		}
		for name := range obj {
			if !slices.Contains(fields, name) {
				t.Fatalf("body %q accepted (%d) with the name %q", body, w.Code, name)
			}
		}
	})
}
