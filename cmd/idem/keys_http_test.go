package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemsqlite"
)

// A response a hostile upstream gave, stored by idemhttp in SQLite, reads in
// `idem keys get` as its status, headers and body, escaped and bounded: its markup
// is text, its NUL bytes, terminal escapes and invalid UTF-8 never reach the
// terminal raw, a huge header is cut and only the first headers are listed. A
// response too large to store reads as the marker it is.
func TestKeysGetHostileStoredResponse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gw.db")
	store, err := idemsqlite.Open(ctx, path, idemsqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	mw, err := idemhttp.Middleware(idemhttp.Config{Store: store, MaxBodyBytes: 1 << 10,
		Scope: func(*http.Request) (string, error) { return "evil", nil }})
	if err != nil {
		t.Fatal(err)
	}
	xss := `<script>alert(1)</script>`
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Write([]byte(strings.Repeat("b", 2<<10)))
			return
		}
		w.Header().Set("Content-Type", "text/html\x1b[2J")
		w.Header().Set("X-Huge", strings.Repeat("h", 50<<10))
		for i := range 40 {
			w.Header().Add("X-Many", strings.Repeat("m", i))
		}
		w.Header()["X-Bad\xff"] = []string{"\x00\x1b]0;pwned\x07"}
		w.WriteHeader(http.StatusAccepted)
		w.Write([]byte(xss + "\x00\xff\x1b[31m"))
	}))
	for _, p := range []string{"/evil", "/big"} {
		r := httptest.NewRequest("POST", p, strings.NewReader("{}"))
		r.Header.Set(idemhttp.HeaderKey, strings.TrimPrefix(p, "/"))
		h.ServeHTTP(httptest.NewRecorder(), r)
	}

	out := mustRun(t, "keys", "get", "--store", "sqlite:"+path, "--scope", "evil", "--id", "evil")
	noRawControls(t, out)
	wantLines(t, out, "http status  202\n", "http header  Content-Type: text/html?[2J\n",
		"http header  X-Huge: "+strings.Repeat("h", admin.PreviewBytes)+"…\n",
		"http header  … 11 more (--json lists 32 of 43)\n", "http body    base64:")
	if n := strings.Count(out, "http header"); n != admin.MaxPreviewHeaders+1 {
		t.Errorf("%d header lines, want %d and one for the rest", n, admin.MaxPreviewHeaders+1)
	}
	if strings.Contains(out, "pwned\x07") || strings.Contains(out, "<script>") || len(out) > 8<<10 {
		t.Errorf("keys get shows the response raw or unbounded (%d bytes):\n%s", len(out), out)
	}

	out = mustRun(t, "keys", "get", "--store", "sqlite:"+path, "--scope", "evil", "--id", "big")
	wantLines(t, out, "http status  200 (sent once, too large to store: a retry is answered 409)\n", "http body    (not stored: 2048 bytes)\n")
	out = mustRun(t, "keys", "list", "--store", "sqlite:"+path, "--scope", "evil")
	noRawControls(t, out)
	wantLines(t, out, "HTTP 200 (not stored: 2048 bytes)", "HTTP 202 text/html?[2J base64:")
}
