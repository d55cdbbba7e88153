package cli

import (
	"context"
	"io"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/idemhq/idem/internal/httpd"
	"github.com/idemhq/idem/internal/metrics"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/internal/redact"
)

// StartDaemon starts what every daemon (serve, relay, admin) runs beside its work:
// its log on stderr, its trace export (stop flushes it) and its registry of the Go,
// process and idem_build_info collectors.
func StartDaemon(ctx context.Context, stderr io.Writer, name string) (log *slog.Logger, reg *prometheus.Registry, stop func(), err error) {
	log = Log(stderr)
	if stop, err = startTracing(ctx, stderr, name, log); err != nil {
		return nil, nil, nil, err
	}
	return log, Registry(), stop, nil
}

// Log returns a daemon's logger: text on w, credentials redacted, and the trace
// and span ids of the context's span on every line logged under one.
func Log(w io.Writer) *slog.Logger {
	return slog.New(otelx.LogHandler(redact.Handler(slog.NewTextHandler(w, nil))))
}

// Registry returns a daemon's metrics registry, with the Go, process and
// idem_build_info collectors.
func Registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := metrics.NewBuild(reg, Binary.Version, Binary.Rev(0), Binary.GoVersion); err != nil {
		panic(err) // a fresh registry: only a programming error gets here
	}
	return reg
}

// Probes serves /metrics from reg and /healthz from check, which returns whether
// the daemon is healthy and a one-line reason: the admin endpoints of relay, serve
// and admin. /healthz's first line is that status; a second names the build
// ("idem v0.1.0 (4d11fda0c3b2)"), for whoever must tell which version answers.
func Probes(reg *prometheus.Registry, check func(context.Context) (bool, string)) http.Handler {
	return httpd.Probes(reg, check, Binary.Short())
}
