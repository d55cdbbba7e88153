package console_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/admin/console"
)

// wantSecurityHeaders checks the headers every response of the console carries.
func wantSecurityHeaders(t *testing.T, what string, h http.Header) {
	t.Helper()
	csp := h.Get("Content-Security-Policy")
	for _, d := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'",
		"frame-ancestors 'none'", "base-uri 'none'", "form-action 'none'", "require-trusted-types-for 'script'"} {
		if !strings.Contains(csp, d+";") && !strings.HasSuffix(csp, d) {
			t.Errorf("%s: CSP %q lacks %q", what, csp, d)
		}
	}
	if strings.Contains(csp, "unsafe-") || strings.Contains(csp, "*") || strings.Contains(csp, "data:") {
		t.Errorf("%s: CSP %q allows unsafe sources", what, csp)
	}
	for name, want := range map[string]string{
		"X-Content-Type-Options": "nosniff",
		"Referrer-Policy":        "no-referrer",
		"X-Frame-Options":        "DENY",
	} {
		if got := h.Get(name); got != want {
			t.Errorf("%s: %s = %q, want %q", what, name, got, want)
		}
	}
}

func serve(h http.Handler, method, target string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, target, nil))
	return w
}

func TestAssets(t *testing.T) {
	t.Parallel()
	h := console.Handler()
	for _, tc := range []struct{ path, contentType, contains string }{
		{"/", "text/html; charset=utf-8", `<script src="console.js" defer></script>`},
		{"/console.js", "text/javascript; charset=utf-8", "textContent"},
		{"/console.css", "text/css; charset=utf-8", ".spark"},
		{"/favicon.svg", "image/svg+xml", "<svg"},
	} {
		w := serve(h, "GET", tc.path)
		if w.Code != http.StatusOK {
			t.Fatalf("GET %s: %d", tc.path, w.Code)
		}
		if ct := w.Header().Get("Content-Type"); ct != tc.contentType {
			t.Errorf("GET %s: Content-Type %q, want %q", tc.path, ct, tc.contentType)
		}
		if !strings.Contains(w.Body.String(), tc.contains) {
			t.Errorf("GET %s: body lacks %q", tc.path, tc.contains)
		}
		wantSecurityHeaders(t, "GET "+tc.path, w.Header())

		// HEAD: the same headers, no body.
		hw := serve(h, "HEAD", tc.path)
		if hw.Code != http.StatusOK || hw.Body.Len() != 0 || hw.Header().Get("Content-Type") != tc.contentType ||
			hw.Header().Get("Content-Length") != w.Header().Get("Content-Length") {
			t.Errorf("HEAD %s: %d, %d bytes, headers %v", tc.path, hw.Code, hw.Body.Len(), hw.Header())
		}
		wantSecurityHeaders(t, "HEAD "+tc.path, hw.Header())

		// A revalidation with the ETag is answered 304.
		etag := w.Header().Get("ETag")
		r := httptest.NewRequest("GET", tc.path, nil)
		r.Header.Set("If-None-Match", etag)
		cw := httptest.NewRecorder()
		h.ServeHTTP(cw, r)
		if etag == "" || cw.Code != http.StatusNotModified {
			t.Errorf("GET %s with If-None-Match %q: %d", tc.path, etag, cw.Code)
		}
	}
}

// TestPageHasNoInlineCode: the CSP forbids inline scripts, handlers and styles, so
// the page must not have any (they would silently not run).
func TestPageHasNoInlineCode(t *testing.T) {
	t.Parallel()
	page := serve(console.Handler(), "GET", "/").Body.String()
	for _, bad := range []*regexp.Regexp{
		regexp.MustCompile(`<script(\s[^>]*)?>[^<]`),              // a script with a body
		regexp.MustCompile(`(?i)<script(?:\s(?:[^>s]|s[^r])*)?>`), // a script without src
		regexp.MustCompile(`(?i)\son[a-z]+\s*=`),                  // an event handler attribute
		regexp.MustCompile(`(?i)\sstyle\s*=`),                     // an inline style
		regexp.MustCompile(`(?i)<style`),
		regexp.MustCompile(`(?i)javascript:`),
		regexp.MustCompile(`(?i)https?://`), // nothing from elsewhere
	} {
		if m := bad.FindString(page); m != "" {
			t.Errorf("page has %q (matching %s)", m, bad)
		}
	}
	js := serve(console.Handler(), "GET", "/console.js").Body.String()
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "localStorage"} {
		if strings.Contains(js, sink) {
			t.Errorf("console.js uses %s", sink)
		}
	}
}

func TestUnknownPathsAndMethods(t *testing.T) {
	t.Parallel()
	h := console.Handler()
	for _, path := range []string{"/index.html", "/static/console.js", "/console.js/", "/api", "/x/../console.js.map",
		"/favicon.ico", "/%2e%2e/console.go", "/console.go"} {
		w := serve(h, "GET", path)
		if w.Code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, w.Code)
		}
		if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
			t.Errorf("GET %s: Content-Type %q", path, ct)
		}
		wantSecurityHeaders(t, "GET "+path, w.Header())
	}
	for _, method := range []string{"POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"} {
		w := serve(h, method, "/")
		if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "GET, HEAD" {
			t.Errorf("%s /: %d, Allow %q", method, w.Code, w.Header().Get("Allow"))
		}
		if strings.Contains(w.Body.String(), "<html") {
			t.Errorf("%s /: the page was served", method)
		}
		wantSecurityHeaders(t, method+" /", w.Header())
	}
}

// TestMountedInAdmin: admin.New serves the console at / and keeps /api/ for itself.
func TestMountedInAdmin(t *testing.T) {
	t.Parallel()
	h, err := admin.New(admin.Config{Token: "full-token-0123456789abcdef", Console: console.Handler(),
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	w := serve(h, "GET", "/")
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "idem console") {
		t.Fatalf("GET /: %d %s", w.Code, w.Body)
	}
	wantSecurityHeaders(t, "GET / through admin", w.Header())
	if w := serve(h, "GET", "/api/"); w.Code != http.StatusUnauthorized || w.Header().Get("Content-Type") != admin.ContentTypeProblem {
		t.Errorf("GET /api/ without a token: %d %s", w.Code, w.Header().Get("Content-Type"))
	}
	if w := serve(h, "GET", "/nothing"); w.Code != http.StatusNotFound {
		t.Errorf("GET /nothing: %d", w.Code)
	}
}

// TestAuditPanel: the page has the audit area's panel with the rows an operator
// reads (published, applied, dead-lettered, missing, in flight, p99), and its
// script calls the audit routes the admin API documents, the repair as a POST
// with the reason the confirmation dialog asks for.
func TestAuditPanel(t *testing.T) {
	t.Parallel()
	page := serve(console.Handler(), "GET", "/").Body.String()
	sec := regexp.MustCompile(`(?s)<section id="area-audit"[^>]*data-area="audit">.*?</section>`).FindString(page)
	if sec == "" {
		t.Fatal("the page has no section of the audit area")
	}
	for _, h := range []string{"<th>published</th>", "<th>applied</th>", "<th>dead-lettered</th>", "<th>missing</th>", "<th>in flight</th>", "<th>p99</th>", `id="audit-run"`} {
		if !strings.Contains(sec, h) {
			t.Errorf("the audit panel lacks %s:\n%s", h, sec)
		}
	}
	js := serve(console.Handler(), "GET", "/console.js").Body.String()
	for _, call := range []string{`api('GET', 'audit')`, `api('POST', 'audit/repair', { reason: a.reason })`, `api('GET', 'audit/repairs'`,
		`actionButton('Repair missing', 'repair'`} {
		if !strings.Contains(js, call) {
			t.Errorf("console.js lacks %s", call)
		}
	}
	h, err := admin.New(admin.Config{Token: "full-token-0123456789abcdef", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/api/openapi.json", nil)
	r.Header.Set("Authorization", "Bearer full-token-0123456789abcdef")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	doc := w.Body.String()
	for _, path := range []string{`"/api/audit"`, `"/api/audit/repair"`, `"/api/audit/repairs"`} {
		if !strings.Contains(doc, path) {
			t.Errorf("the admin API does not document %s, which the console calls", path)
		}
	}
}
