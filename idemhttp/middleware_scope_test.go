package idemhttp_test

import (
	"net/http"
	"testing"

	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemkey"
)

// The attacks on the scope: a caller who knows (or guesses) another caller's key
// and body must not receive that caller's stored response.
func TestMiddlewareScopeAttacks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		cfg      idemhttp.Config
		victim   []string // headers of the legitimate caller
		attacker []string // headers of the attacker
	}{
		// A tenant header is caller-controlled: without the tenant's credentials
		// it must not select the tenant's responses.
		{"spoofed tenant header", idemhttp.Config{Scope: idemhttp.HeaderScope("X-Tenant", idemhttp.DefaultCredentialHeaders...)},
			[]string{"X-Tenant: acme", "Authorization: Bearer acme-secret"}, []string{"X-Tenant: acme"}},
		{"spoofed tenant header, other credentials", idemhttp.Config{Scope: idemhttp.HeaderScope("X-Tenant")},
			[]string{"X-Tenant: acme", "Authorization: Bearer acme-secret"}, []string{"X-Tenant: acme", "Authorization: Bearer mallory"}},
		// Callers authenticated by cookie or API key are not all "anonymous".
		{"cookie vs none", idemhttp.Config{}, []string{"Cookie: session=alice"}, nil},
		{"cookie vs cookie", idemhttp.Config{}, []string{"Cookie: session=alice"}, []string{"Cookie: session=mallory"}},
		{"api key vs none", idemhttp.Config{}, []string{"X-Api-Key: alice-key"}, nil},
		{"api key vs api key", idemhttp.Config{}, []string{"X-Api-Key: alice-key"}, []string{"X-Api-Key: mallory-key"}},
		{"custom credential header", idemhttp.Config{CredentialHeaders: []string{"X-Session"}}, []string{"X-Session: alice"}, []string{"X-Session: mallory"}},
		{"proxy authorization", idemhttp.Config{}, []string{"Proxy-Authorization: Basic YWxpY2U6cHc="}, nil},
		// With named session cookies, only they identify the caller; another session,
		// or none with the victim's other cookies, is another scope.
		{"named cookie vs other session", idemhttp.Config{CredentialCookies: []string{"sid"}},
			[]string{"Cookie: sid=alice; theme=dark"}, []string{"Cookie: sid=mallory; theme=dark"}},
		{"named cookie vs other cookies only", idemhttp.Config{CredentialCookies: []string{"sid"}},
			[]string{"Cookie: sid=alice; _ga=1"}, []string{"Cookie: _ga=1"}},
		{"tenant with named cookie", idemhttp.Config{Scope: idemhttp.TenantScope("X-Tenant", idemhttp.CookieCredentialScope([]string{"sid"}))},
			[]string{"X-Tenant: acme", "Cookie: sid=alice"}, []string{"X-Tenant: acme", "Cookie: sid=mallory"}},
		// A session cookie Go's parser refuses is still a credential (a lenient
		// upstream accepts it): its caller is not "anonymous".
		{"unparsed named cookie vs none", idemhttp.Config{CredentialCookies: []string{"sid"}},
			[]string{`Cookie: sid={"user":"alice"}`}, nil},
		{"unparsed named cookie vs other cookies only", idemhttp.Config{CredentialCookies: []string{"sid"}},
			[]string{`Cookie: sid=a"b; _ga=1`}, []string{"Cookie: _ga=1"}},
		{"unparsed named cookie vs another", idemhttp.Config{CredentialCookies: []string{"sid"}},
			[]string{`Cookie: sid=ab\c`}, []string{`Cookie: sid=ab\d`}},
		{"non-ASCII named cookie vs none", idemhttp.Config{CredentialCookies: []string{"sid"}},
			[]string{"Cookie: sid=été"}, nil},
		{"tenant with unparsed named cookie", idemhttp.Config{Scope: idemhttp.TenantScope("X-Tenant", idemhttp.CookieCredentialScope([]string{"sid"}))},
			[]string{"X-Tenant: acme", `Cookie: sid={"user":"alice"}`}, []string{"X-Tenant: acme"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := &mwCounter{fn: func(w http.ResponseWriter, r *http.Request, _ []byte) {
				w.Write([]byte("secret of " + r.Header.Get("Authorization") + r.Header.Get("Cookie") +
					r.Header.Get("X-Api-Key") + r.Header.Get("X-Session") + r.Header.Get("Proxy-Authorization")))
			}}
			cfg := tc.cfg
			cfg.Store = mwMemStore(t)
			srv := mwServe(t, cfg, h)
			key := idemkey.NewV7()
			v := mwDo(t, "POST", srv.URL+"/account", key, []byte("same body"), tc.victim...)
			a := mwDo(t, "POST", srv.URL+"/account", key, []byte("same body"), tc.attacker...)
			if v.status != 200 || a.status != 200 {
				t.Fatalf("statuses %d, %d", v.status, a.status)
			}
			if a.header.Get(idemhttp.HeaderReplayed) != "" || string(a.body) == string(v.body) {
				t.Fatalf("the attacker received the victim's stored response %q (replayed %q)", a.body, a.header.Get(idemhttp.HeaderReplayed))
			}
			if n := h.runs.Load(); n != 2 {
				t.Errorf("handler ran %d times, want once per caller", n)
			}
			// The victim's own retry still replays.
			if r := mwDo(t, "POST", srv.URL+"/account", key, []byte("same body"), tc.victim...); r.header.Get(idemhttp.HeaderReplayed) != "true" || string(r.body) != string(v.body) {
				t.Errorf("the victim's retry got %q replayed=%q", r.body, r.header.Get(idemhttp.HeaderReplayed))
			}
		})
	}
}

// A request authenticated by Authorization alone keeps the scope it had under
// AuthorizationScope, the earlier default, so keys stored before an upgrade replay.
func TestCredentialScopeKeepsAuthorizationScope(t *testing.T) {
	t.Parallel()
	scope := idemhttp.CredentialScope(append(idemhttp.DefaultCredentialHeaders, "authorization")...)
	r, _ := http.NewRequest("POST", "/", nil)
	r.Header.Set("Authorization", "Bearer t")
	got, _ := scope(r)
	want, _ := idemhttp.AuthorizationScope(r)
	if got != want {
		t.Fatalf("scope %q, want AuthorizationScope's %q", got, want)
	}
	r.Header.Set("X-Api-Key", "k")
	if got, _ := scope(r); got == want {
		t.Fatalf("an API key beside Authorization does not change the scope %q", got)
	}
}

// With CredentialCookies, a browser retry whose other cookies changed (analytics,
// preferences) stays in the caller's scope and replays instead of running again.
func TestMiddlewareCredentialCookiesIgnoreOtherCookies(t *testing.T) {
	t.Parallel()
	h := &mwCounter{fn: func(w http.ResponseWriter, r *http.Request, _ []byte) { w.Write([]byte("charged")) }}
	srv := mwServe(t, idemhttp.Config{Store: mwMemStore(t), CredentialCookies: []string{"sid"}}, h)
	key := idemkey.NewV7()
	first := mwDo(t, "POST", srv.URL+"/pay", key, []byte("5"), "Cookie: sid=alice; _ga=GA1.1.111")
	retry := mwDo(t, "POST", srv.URL+"/pay", key, []byte("5"), "Cookie: _ga=GA1.1.222; sid=alice")
	if first.status != 200 || retry.header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("retry with a changed analytics cookie: %d replayed=%q; want the replay", retry.status, retry.header.Get(idemhttp.HeaderReplayed))
	}
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want once", n)
	}
}
