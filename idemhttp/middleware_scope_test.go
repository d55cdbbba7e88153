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
