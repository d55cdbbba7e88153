package admin_test

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
)

func TestScopesList(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for i, sc := range []string{"cred:b2", "anonymous", "cred:a1", "tenant:x", "auth:9"} {
		for j := range 3 {
			b.ins.put(idem.Record{Key: idem.Key{Scope: sc, ID: fmt.Sprintf("k%d-%d", i, j)}, State: idem.StateCompleted})
		}
	}
	var scopes []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatalf("no last page after %d pages", pages)
		}
		var page admin.ScopePage
		wantJSON(t, b.do(t, "GET", "/api/scopes?store=main&limit=2&cursor="+url.QueryEscape(cursor), readToken, ""), &page)
		if page.Store != "main" || len(page.Scopes) > 2 {
			t.Fatalf("page %+v", page)
		}
		scopes = append(scopes, page.Scopes...)
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	if got := strings.Join(scopes, ","); got != "anonymous,auth:9,cred:a1,cred:b2,tenant:x" {
		t.Fatalf("paged scopes %s", got)
	}
	// With one store, store may be left out; an empty store answers an empty list.
	var page admin.ScopePage
	wantJSON(t, b.do(t, "GET", "/api/scopes", readToken, ""), &page)
	if len(page.Scopes) != 5 || page.Next != "" {
		t.Fatalf("default page %+v", page)
	}

	for target, field := range map[string]string{
		"/api/scopes?limit=0":    "limit",
		"/api/scopes?limit=1001": "limit",
		"/api/scopes?limit=x":    "limit",
		"/api/scopes?cursor=" + strings.Repeat("c", admin.MaxCursorLen+1): "cursor is longer",
		"/api/scopes?cursor=garbage":                                      "cursor is not a cursor",
	} {
		wantProblem(t, b.do(t, "GET", target, readToken, ""), 400, admin.ProblemInvalid, field)
	}
	wantProblem(t, b.do(t, "GET", "/api/scopes?store=nope", readToken, ""), 404, admin.ProblemNotFound, `no store named "nope"`)
	wantProblem(t, b.do(t, "GET", "/api/scopes", "", ""), 401, admin.ProblemUnauthorized)

	b.ins.err = &idem.BackendError{Backend: "fake", Op: "scopes", Err: errors.New("secret dsn in here")}
	p := wantProblem(t, b.do(t, "GET", "/api/scopes", readToken, ""), 503, admin.ProblemUnavailable, "fake backend failed during scopes")
	if strings.Contains(p.Detail, "secret") {
		t.Fatalf("detail leaks the backend's message: %s", p.Detail)
	}
}

// A store that cannot list its scopes says so, and how to look instead.
func TestScopesNotImplemented(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *admin.Config) {
		c.Stores = map[string]idem.Inspector{"plain": plainInspector{c.Stores["main"]}}
	})
	wantProblem(t, b.do(t, "GET", "/api/scopes?store=plain", readToken, ""), 501, admin.ProblemNotImplemented,
		`store "plain" cannot list its scopes`, "GET /api/keys?scope=")
}
