package admin_test

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemmem"
)

// storedBy runs one request with key id through idemhttp's Middleware over an
// idemmem store, answered by handle, and returns the store: it holds the
// response as the Middleware stored it.
func storedBy(t *testing.T, store *idemmem.Store, id string, handle http.HandlerFunc) {
	t.Helper()
	mw, err := idemhttp.Middleware(idemhttp.Config{Store: store, Scope: func(*http.Request) (string, error) { return "t1", nil }})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/orders", strings.NewReader(`{}`))
	r.Header.Set("Idempotency-Key", id)
	w := httptest.NewRecorder()
	mw(handle).ServeHTTP(w, r)
	if w.Header().Get(idemhttp.HeaderReplayed) != "" {
		t.Fatalf("%s: replayed on the first request", id)
	}
}

// A response idemhttp stored is shown decoded (status, headers, body preview) by
// GET /api/key and GET /api/keys, beside the raw preview kept for old clients; a
// hostile handler's HTML, NUL bytes, invalid UTF-8 and huge headers come out
// bounded and cleaned; a result of another format has no "http" field.
func TestKeyStoredHTTPResponse(t *testing.T) {
	t.Parallel()
	store, err := idemmem.New(idemmem.Config{KeepKeys: true})
	if err != nil {
		t.Fatal(err)
	}
	storedBy(t, store, "json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/orders/7")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":7,"status":"paid","note":"` + strings.Repeat("n", 100) + `"}`))
	})
	xss := `<script>window.__x=1</script>`
	storedBy(t, store, "hostile", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html\x00"+xss)
		w.Header().Set("X-Huge", strings.Repeat("h", 60<<10))
		for i := range 40 {
			w.Header().Add("X-Many", strings.Repeat("m", i))
		}
		w.Header()["X-Bad\xff"] = []string{"v\xfe\x00\x1b[31m"}
		w.WriteHeader(http.StatusOK)
		w.Write([]byte(xss + "\x00\xff"))
	})
	bin := []byte{0xde, 0xad, 0xbe, 0xef, 0x00}
	storedBy(t, store, "binary", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(bin)
	})
	// Not idemhttp's: what idem.Do or an inbox stores.
	k := idem.Key{Scope: "t1", ID: "plain"}
	res, err := store.Claim(t.Context(), idem.Claim{Key: k})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Complete(t.Context(), k, res.Token, []byte("ok")); err != nil {
		t.Fatal(err)
	}

	b := setup(t, func(c *admin.Config) { c.Stores = map[string]idem.Inspector{"gw": store} })
	get := func(id string) admin.KeyRecord {
		t.Helper()
		var rec admin.KeyRecord
		wantJSON(t, b.do(t, "GET", "/api/key?scope=t1&id="+id, readToken, ""), &rec)
		return rec
	}

	rec := get("json")
	h := rec.HTTP
	if h == nil {
		t.Fatalf("json: no http view: %+v", rec)
	}
	wantBody := `{"id":7,"status":"paid","note":"` + strings.Repeat("n", admin.PreviewBytes-32)
	if h.Status != 201 || h.ContentType != "application/json" || h.HeaderCount != 2 || h.HeadersTruncated ||
		h.Body != (admin.BodyPreview{Size: 134, Encoding: "utf-8", Preview: wantBody, Truncated: true}) {
		t.Errorf("json: %+v", h)
	}
	if len(h.Headers) != 2 || h.Headers[0] != (admin.HeaderField{Name: "Content-Type", Value: "application/json"}) &&
		h.Headers[1] != (admin.HeaderField{Name: "Content-Type", Value: "application/json"}) {
		t.Errorf("json headers: %+v", h.Headers)
	}
	if rec.Result.Size == 0 || rec.Result.Encoding != "hex" { // the raw preview stays
		t.Errorf("json raw result: %+v", rec.Result)
	}

	h = get("hostile").HTTP
	if h == nil {
		t.Fatal("hostile: no http view")
	}
	if h.Status != 200 || h.HeaderCount != 43 || !h.HeadersTruncated || len(h.Headers) != admin.MaxPreviewHeaders {
		t.Errorf("hostile: status %d, %d headers of %d, truncated %v", h.Status, len(h.Headers), h.HeaderCount, h.HeadersTruncated)
	}
	if h.ContentType != "text/html?"+xss { // NUL shown as '?', the markup as text (JSON escapes it)
		t.Errorf("hostile content type %q", h.ContentType)
	}
	for _, f := range h.Headers {
		if len(f.Name) > admin.PreviewBytes || len(f.Value) > admin.PreviewBytes || strings.ContainsAny(f.Name+f.Value, "\x00\x1b\ufffd") {
			t.Errorf("hostile header not bounded or cleaned: %q: %q", f.Name, f.Value)
		}
		if f.Name == "X-Huge" && (!f.Truncated || f.Value != strings.Repeat("h", admin.PreviewBytes)) {
			t.Errorf("X-Huge: %+v", f)
		}
	}
	if h.Body.Encoding != "base64" || h.Body.Size != int64(len(xss)+2) || h.Body.Truncated {
		t.Errorf("hostile body: %+v", h.Body)
	} else if got, _ := base64.StdEncoding.DecodeString(h.Body.Preview); string(got) != xss+"\x00\xff" {
		t.Errorf("hostile body preview decodes to %q", got)
	}
	// The JSON itself carries no markup: encoding/json escapes < and >.
	if raw := b.do(t, "GET", "/api/key?scope=t1&id=hostile", readToken, "").Body.String(); strings.Contains(raw, "<script") {
		t.Errorf("raw markup in the answer: %s", raw)
	}

	if h := get("binary").HTTP; h == nil || h.Status != 200 || h.ContentType != "application/octet-stream" ||
		h.Body != (admin.BodyPreview{Size: 5, Encoding: "base64", Preview: base64.StdEncoding.EncodeToString(bin)}) {
		t.Errorf("binary: %+v", h)
	}
	if rec := get("plain"); rec.HTTP != nil || !reflect.DeepEqual(rec.Result, admin.Preview{Size: 2, Encoding: "text", Preview: "ok"}) {
		t.Errorf("plain: %+v %+v", rec.HTTP, rec.Result)
	}

	// The list shows the same view.
	var page admin.KeyPage
	wantJSON(t, b.do(t, "GET", "/api/keys?scope=t1", readToken, ""), &page)
	statuses := map[string]int{}
	for _, r := range page.Records {
		if r.HTTP != nil {
			statuses[r.ID] = r.HTTP.Status
		}
	}
	if len(page.Records) != 4 || statuses["json"] != 201 || statuses["hostile"] != 200 || statuses["binary"] != 200 || len(statuses) != 3 {
		t.Errorf("list: %d records, statuses %v", len(page.Records), statuses)
	}
}

// FuzzDecodeStoredHTTP: whatever the stored bytes, the view is bounded and clean.
func FuzzDecodeStoredHTTP(f *testing.F) {
	f.Add([]byte{1, 0, 200, 1, 3, 'X', '-', 'A', 2, 0, 0xff, '<', 'b', '>'})
	f.Add([]byte{2, 0, 200, 0x80, 0x01})
	f.Add([]byte("ok"))
	f.Fuzz(func(t *testing.T, stored []byte) {
		v, ok := admin.DecodeStoredHTTP(stored)
		if !ok {
			return
		}
		if len(v.Headers) > admin.MaxPreviewHeaders || len(v.ContentType) > admin.PreviewBytes ||
			len(v.Body.Preview) > base64.StdEncoding.EncodedLen(admin.PreviewBytes) {
			t.Fatalf("unbounded view %+v", v)
		}
		for _, s := range append([]string{v.ContentType}, headerStrings(v.Headers)...) {
			if strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\ufffd' }) || len(s) > admin.PreviewBytes {
				t.Fatalf("unclean %q", s)
			}
		}
		if v.Body.Encoding == "utf-8" && strings.ContainsRune(v.Body.Preview, 0) {
			t.Fatalf("NUL in a text preview: %q", v.Body.Preview)
		}
	})
}

func headerStrings(fs []admin.HeaderField) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Name, f.Value)
	}
	return out
}
