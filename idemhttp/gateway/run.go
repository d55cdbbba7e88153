package gateway

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/httpd"
	"github.com/idemhq/idem/storekit"
)

// ServeError is the failure of one of Serve's servers after it started.
type ServeError struct {
	Admin bool // the admin listener's server, else the gateway's
	Err   error
}

func (e *ServeError) Error() string {
	if e.Admin {
		return "gateway admin listener: " + e.Err.Error()
	}
	return "gateway listener: " + e.Err.Error()
}

func (e *ServeError) Unwrap() error { return e.Err }

// running is what Serve started and Close stops.
type running struct {
	srv, admin *http.Server
	stopSweep  context.CancelFunc
	sweeping   sync.WaitGroup
}

// Run serves the gateway on ln and its admin handler on admin (nil for none) until
// ctx ends or a server fails, then stops as Close does. It returns nil after a stop
// by ctx.
func (g *Gateway) Run(ctx context.Context, ln, admin net.Listener) error {
	var err error
	select {
	case <-ctx.Done():
	case err = <-g.Serve(ctx, ln, admin):
	}
	_ = g.Close()
	return err
}

// Serve serves the gateway on ln and Config.Admin on admin (nil for none), in the
// background, each with the Config's timeouts and at most Config.MaxConns
// connections at once; it starts sweeping the store (an idem.Sweeper) every minute. The first
// failure of a server lands on the channel, as a *ServeError. Call Close to stop.
func (g *Gateway) Serve(ctx context.Context, ln, admin net.Listener) <-chan error {
	c := g.cfg
	errs := make(chan error, 2)
	fail := func(isAdmin bool) func(error) {
		return func(err error) { errs <- &ServeError{Admin: isAdmin, Err: err} }
	}
	to := httpd.Timeouts{Read: c.ReadTimeout, Write: c.WriteTimeout, Idle: c.IdleTimeout, MaxConns: c.MaxConns}
	r := &running{srv: httpd.Serve(ln, g, to, c.Logger, fail(false))}
	if admin != nil {
		r.admin = httpd.Serve(admin, g.adminHandler(), to, c.Logger, fail(true))
	}
	var sweepCtx context.Context
	sweepCtx, r.stopSweep = context.WithCancel(context.WithoutCancel(ctx))
	if sw, ok := c.Store.(idem.Sweeper); ok {
		r.sweeping.Go(func() { _ = storekit.RunSweeper(sweepCtx, sw, time.Minute, c.Logger) })
	}
	g.run = r
	return errs
}

// adminHandler is Config.Admin, or /metrics and /healthz.
func (g *Gateway) adminHandler() http.Handler {
	if g.cfg.Admin != nil {
		return g.cfg.Admin
	}
	gather, ok := g.cfg.Registerer.(prometheus.Gatherer)
	if !ok {
		gather = prometheus.NewRegistry()
	}
	return httpd.Probes(gather, g.Health, "")
}

// Close stops what Serve started, in order: it stops taking connections, finishes
// the requests in flight (up to Config.ShutdownTimeout, then cuts them: a key whose
// response was not stored is free again when its lease ends), stops the admin
// server and the sweeper. The store stays open.
func (g *Gateway) Close() error {
	r := g.run
	if r == nil {
		return errNotServing
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.ShutdownTimeout)
	defer cancel()
	err := r.srv.Shutdown(ctx)
	if err != nil {
		_ = r.srv.Close()
		g.cfg.Logger.Warn("idem serve: connections of requests still running at --shutdown-timeout were closed; "+
			"a key whose response was not stored is free again when its lease ends", "err", err, "lease", g.cfg.lease())
	}
	if r.admin != nil {
		_ = r.admin.Shutdown(ctx)
	}
	r.stopSweep()
	r.sweeping.Wait()
	return err
}
