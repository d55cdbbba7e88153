package main

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/cmd/idem/internal/cli"
)

// adminHandler serves /metrics from reg and /healthz from check, which returns whether
// the daemon is healthy and a one-line reason: the admin endpoints of relay, serve and
// admin. /healthz's first line is that status; a second names the build
// ("idem v0.1.0 (4d11fda0c3b2)"), for whoever must tell which version answers.
func adminHandler(reg *prometheus.Registry, check func(context.Context) (bool, string)) http.Handler {
	return cli.Probes(reg, check)
}
