package idemgrpc_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemgrpc"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/internal/orderspb"
)

// scopes wraps a Config.Scope and records the scope of every call.
type scopes struct {
	inner func(context.Context) (string, error)
	mu    sync.Mutex
	seen  []string
}

func (s *scopes) scope(ctx context.Context) (string, error) {
	v, err := s.inner(ctx)
	s.mu.Lock()
	s.seen = append(s.seen, v)
	s.mu.Unlock()
	return v, err
}

func (s *scopes) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

func withAuth(ctx context.Context, auth string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", auth)
}

// Two callers with different credentials never share a key: the same key from
// the second runs its own handler; the same credentials replay.
func TestCredentialScopeSeparatesCallers(t *testing.T) {
	t.Parallel()
	rec := &scopes{inner: idemgrpc.CredentialScope(idemgrpc.DefaultCredentialMetadata...)}
	r := newRig(t, idemgrpc.Config{Scope: rec.scope}, rigOpts{})
	key := idemkey.NewV7()
	bg := context.Background()
	alice := r.place(withAuth(bg, "Bearer alice"), key, "c", 5)
	bob := r.place(withAuth(bg, "Bearer bob"), key, "c", 5)
	apiKey := r.place(metadata.AppendToOutgoingContext(bg, "X-Api-Key", "Bearer alice"), key, "c", 5)
	anon := r.place(bg, key, "c", 5)
	for _, c := range []call{alice, bob, apiKey, anon} {
		if c.err != nil || idemgrpc.Replayed(c.header) {
			t.Fatalf("%v, header %v: want each caller's own execution", c.err, c.header)
		}
	}
	if n := r.orders.Executions(); n != 4 {
		t.Fatalf("%d executions, want 4", n)
	}
	again := r.place(withAuth(bg, "Bearer alice"), key, "c", 5)
	if !idemgrpc.Replayed(again.header) || !proto.Equal(again.order, alice.order) {
		t.Fatalf("alice again: %v %v: want her replay", again.order, again.err)
	}
	s := rec.all()
	if s[0] != s[4] || s[3] != "anonymous" || distinct(s[:4]) != 4 || !strings.HasPrefix(s[0], "cred:") || len(s[0]) != len("cred:")+32 {
		t.Fatalf("scopes %q", s)
	}
	for _, v := range s {
		if strings.Contains(v, "alice") || strings.Contains(v, "bob") {
			t.Fatalf("scope %q holds a credential in clear", v)
		}
	}
}

func distinct(s []string) int {
	m := map[string]bool{}
	for _, v := range s {
		m[v] = true
	}
	return len(m)
}

// pki is a CA, a server certificate for 127.0.0.1 and two client certificates.
type pki struct {
	pool    *x509.CertPool
	server  tls.Certificate
	clients [2]tls.Certificate
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	caKey := ecKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "idem test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	issue := func(serial int64, tmpl *x509.Certificate) tls.Certificate {
		key := ecKey(t)
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = ca.NotBefore, ca.NotAfter
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	p.server = issue(2, &x509.Certificate{Subject: pkix.Name{CommonName: "server"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	for i, name := range []string{"billing", "shipping"} {
		p.clients[i] = issue(int64(3+i), &x509.Certificate{Subject: pkix.Name{CommonName: name},
			DNSNames: []string{name + ".internal"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	}
	return p
}

func ecKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// serverTLS is the server option of p's server certificate with client
// authentication mode.
func (p *pki) serverTLS(mode tls.ClientAuthType) grpc.ServerOption {
	return grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{p.server}, ClientAuth: mode, ClientCAs: p.pool}))
}

// dial returns a client of addr presenting client certificate i (none when i < 0).
func (p *pki) dial(t *testing.T, addr string, i int) orderspb.OrdersClient {
	t.Helper()
	cfg := &tls.Config{RootCAs: p.pool}
	if i >= 0 {
		cfg.Certificates = []tls.Certificate{p.clients[i]}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return orderspb.NewOrdersClient(conn)
}

// placeWith calls PlaceOrder through client with key and tells whether the
// call was replayed.
func placeWith(t *testing.T, ctx context.Context, client orderspb.OrdersClient, key string) bool {
	t.Helper()
	var header metadata.MD
	if _, err := client.PlaceOrder(withKey(ctx, key), &orderspb.PlaceOrderRequest{Customer: "c", Amount: 5}, grpc.Header(&header)); err != nil {
		t.Fatal(err)
	}
	return idemgrpc.Replayed(header)
}

// Mutual TLS: two verified client certificates are two scopes; an unverified
// certificate (RequestClientCert) counts for nothing, only metadata credentials
// do.
func TestCredentialScopeMutualTLS(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	bg := context.Background()
	t.Run("verified", func(t *testing.T) {
		t.Parallel()
		rec := &scopes{inner: idemgrpc.CredentialScope(idemgrpc.DefaultCredentialMetadata...)}
		r := newRig(t, idemgrpc.Config{Scope: rec.scope}, rigOpts{server: []grpc.ServerOption{p.serverTLS(tls.RequireAndVerifyClientCert)},
			dial: []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: p.pool, Certificates: []tls.Certificate{p.clients[0]}}))}})
		billing, shipping := r.client, p.dial(t, r.addr, 1)
		key := idemkey.NewV7()
		if placeWith(t, bg, billing, key) || placeWith(t, bg, shipping, key) {
			t.Fatal("a replay across client certificates")
		}
		if !placeWith(t, bg, billing, key) {
			t.Fatal("the same certificate was not replayed")
		}
		// The certificate and the metadata credentials make the scope together.
		if placeWith(t, withAuth(bg, "Bearer x"), billing, key) {
			t.Fatal("a replay across metadata credentials under one certificate")
		}
		s := rec.all()
		if s[0] == s[1] || s[0] != s[2] || s[3] == s[0] || !strings.HasPrefix(s[0], "cred:") || !strings.HasPrefix(s[1], "cred:") {
			t.Fatalf("scopes %q", s)
		}
		if n := r.orders.Executions(); n != 3 {
			t.Fatalf("%d executions, want 3", n)
		}
	})
	t.Run("unverified", func(t *testing.T) {
		t.Parallel()
		rec := &scopes{inner: idemgrpc.CredentialScope(idemgrpc.DefaultCredentialMetadata...)}
		r := newRig(t, idemgrpc.Config{Scope: rec.scope}, rigOpts{server: []grpc.ServerOption{p.serverTLS(tls.RequestClientCert)},
			dial: []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: p.pool, Certificates: []tls.Certificate{p.clients[0]}}))}})
		billing, shipping, none := r.client, p.dial(t, r.addr, 1), p.dial(t, r.addr, -1)
		key := idemkey.NewV7()
		if placeWith(t, bg, billing, key) || !placeWith(t, bg, shipping, key) || !placeWith(t, bg, none, key) {
			t.Fatal("an unverified certificate made a scope")
		}
		auth := idemkey.NewV7()
		if placeWith(t, withAuth(bg, "Bearer x"), billing, auth) || !placeWith(t, withAuth(bg, "Bearer x"), shipping, auth) {
			t.Fatal("the metadata credentials alone should make the scope")
		}
		s := rec.all()
		if s[0] != "anonymous" || s[1] != "anonymous" || s[2] != "anonymous" || s[3] != s[4] || !strings.HasPrefix(s[3], "cred:") {
			t.Fatalf("scopes %q", s)
		}
	})
}

// TenantScope refuses a call without its tenant, and a tenant never shares keys
// across credentials: any caller can claim one.
func TestTenantScope(t *testing.T) {
	t.Parallel()
	rec := &scopes{inner: idemgrpc.TenantScope("X-Tenant", idemgrpc.CredentialScope("authorization"))}
	r := newRig(t, idemgrpc.Config{Scope: rec.scope}, rigOpts{})
	bg := context.Background()
	tenant := func(name, auth string) context.Context {
		return metadata.AppendToOutgoingContext(withAuth(bg, auth), "x-tenant", name)
	}
	key := idemkey.NewV7()
	c := r.place(withAuth(bg, "Bearer a"), key, "c", 5)
	wantStatus(t, c.err, codes.InvalidArgument, idemgrpc.ReasonInvalidScope)
	c = r.place(metadata.AppendToOutgoingContext(tenant("acme", "Bearer a"), "x-tenant", "acme"), key, "c", 5)
	wantStatus(t, c.err, codes.InvalidArgument, idemgrpc.ReasonInvalidScope)
	if n := r.orders.Executions(); n != 0 {
		t.Fatalf("a refused call ran: %d", n)
	}
	for i, tt := range []struct {
		ctx      context.Context
		replayed bool
	}{
		{tenant("acme", "Bearer a"), false},
		{tenant("acme", "Bearer b"), false}, // same tenant, another caller
		{tenant("globex", "Bearer a"), false},
		{tenant("acme", "Bearer a"), true},
	} {
		if c := r.place(tt.ctx, key, "c", 5); c.err != nil || idemgrpc.Replayed(c.header) != tt.replayed {
			t.Fatalf("call %d: %v, header %v: want replayed=%v", i, c.err, c.header, tt.replayed)
		}
	}
	if s := rec.all(); !strings.HasPrefix(s[2], "tenant:acme/cred:") {
		t.Fatalf("scopes %q", s)
	}
}

// A Config.Scope error is InvalidArgument (an *idem.InputError) or the status
// the function chose; the handler does not run.
func TestScopeErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err    error
		code   codes.Code
		reason string
	}{
		{&idem.InputError{Field: "caller", Reason: "is unknown"}, codes.InvalidArgument, idemgrpc.ReasonInvalidScope},
		{status.Error(codes.Unauthenticated, "who are you"), codes.Unauthenticated, ""},
	} {
		r := newRig(t, idemgrpc.Config{Scope: func(context.Context) (string, error) { return "", tt.err }}, rigOpts{})
		c := r.place(context.Background(), idemkey.NewV7(), "c", 5)
		wantStatus(t, c.err, tt.code, tt.reason)
		if n := r.orders.Executions(); n != 0 {
			t.Fatalf("the handler ran %d times", n)
		}
	}
}
