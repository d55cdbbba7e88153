package idemgrpc_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/idemhq/idem/idemgrpc"
)

// The scopes read the call's incoming metadata key by key (not through a copy of
// all of it): each credential counts, in any letter case the map holds it, and a
// call without one is anonymous.
func TestScopesReadIncomingMetadata(t *testing.T) {
	scope := idemgrpc.CredentialScope(idemgrpc.DefaultCredentialMetadata...)
	in := func(md metadata.MD) context.Context { return metadata.NewIncomingContext(context.Background(), md) }
	get := func(ctx context.Context) string {
		t.Helper()
		s, err := scope(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := get(in(metadata.Pairs("authorization", "Bearer a")))
	if b := get(in(metadata.Pairs("authorization", "Bearer b"))); a == b {
		t.Errorf("two tokens share the scope %s", a)
	}
	if raw := get(in(metadata.MD{"Authorization": {"Bearer a"}})); raw != a {
		t.Errorf("a map keyed Authorization gives %s, authorization %s", raw, a)
	}
	if k := get(in(metadata.Pairs("authorization", "Bearer a", "x-api-key", "k"))); k == a {
		t.Errorf("an API key beside the token left the scope %s", k)
	}
	if s := get(in(metadata.Pairs("user-agent", "x"))); s != "anonymous" {
		t.Errorf("a call without credentials is %s, want anonymous", s)
	}
	if s := get(context.Background()); s != "anonymous" {
		t.Errorf("a context without metadata is %s, want anonymous", s)
	}
	tenant := idemgrpc.TenantScope("x-tenant", scope)
	s, err := tenant(in(metadata.Pairs("x-tenant", "acme", "authorization", "Bearer a")))
	if err != nil || s != "tenant:acme/"+a {
		t.Errorf("TenantScope = %q, %v; want tenant:acme/%s", s, err, a)
	}
	if _, err := tenant(in(metadata.Pairs("authorization", "Bearer a"))); err == nil {
		t.Error("TenantScope accepted a call without its tenant")
	}
}
