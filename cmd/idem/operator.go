package main

import (
	"context"

	"github.com/idemhq/idem/cmd/idem/internal/operator"
	"github.com/idemhq/idem/idemhttp"
)

// The operator commands (keys, dlq, outbox, sagas) are package operator's; main
// hands them its streams and serve's scope flags (keys scope).

func (m *Main) operator() *operator.Cmd {
	return &operator.Cmd{Stdout: m.Stdout, Stderr: m.Stderr, Help: m.help(), ServeScope: serveScope}
}

func (m *Main) runKeys(ctx context.Context, args []string) error { return m.operator().Keys(ctx, args) }
func (m *Main) runDLQ(ctx context.Context, args []string) error  { return m.operator().DLQ(ctx, args) }
func (m *Main) runOutbox(ctx context.Context, args []string) error {
	return m.operator().Outbox(ctx, args)
}
func (m *Main) runQueue(ctx context.Context, args []string) error {
	return m.operator().Queue(ctx, args)
}
func (m *Main) runSagas(ctx context.Context, args []string) error {
	return m.operator().Sagas(ctx, args)
}

// serveScope is the middleware configuration serve would make of its scope flags
// (and its defaults for the others).
func serveScope(f operator.ScopeFlags) (idemhttp.Config, error) {
	so := serveOptions{oversize: "reject", methods: "POST", scopeHeader: f.Header, trustScope: f.Trust,
		credentialHeaders: f.CredentialHeaders, credentialCookies: f.CredentialCookies}
	return so.middlewareConfig()
}
