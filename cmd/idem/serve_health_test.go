package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/cmd/idem/internal/open"
	"github.com/idemhq/idem/idemhttp/gateway"
	"github.com/idemhq/idem/internal/testsvc"
)

// serve's /healthz says in idem's words why the store failed: the driver's text,
// with the database user, the database and the addresses, goes to the log only.
func TestServeHealthHidesStoreDetails(t *testing.T) {
	t.Parallel()
	proxy, through := testsvc.PostgresProxy(t, testsvc.PostgresDatabase(t))
	u, err := url.Parse(through)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := open.ParseStore(through)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	store, closeStore, err := spec.Open(ctx, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeStore)
	var log bytes.Buffer
	check := gateway.StoreHealth(store, slog.New(slog.NewTextHandler(&log, nil)), cli.ReasonOf)
	if ok, msg := check(ctx); !ok || !strings.HasPrefix(msg, "ok") {
		t.Fatalf("/healthz before the outage: %v %q", ok, msg)
	}

	proxy.Close() // the database goes away: connections reset, new ones refused
	var msg string
	// The pool's idle connection fails first (connection closed), then new ones
	// are refused: the driver's error names the user, the database and the address.
	testsvc.Eventually(t, time.Minute, "/healthz unhealthy: connection refused", func() bool {
		var ok bool
		ok, msg = check(ctx)
		return !ok && strings.Contains(log.String(), "refused")
	})
	_, port, _ := strings.Cut(proxy.Addr(), ":")
	database := strings.TrimPrefix(u.Path, "/")
	for _, secret := range []string{database, port, "user=", u.User.Username()} {
		if strings.Contains(msg, secret) {
			t.Errorf("/healthz = %q: it names %q; want idem's words only", msg, secret)
		}
	}
	if msg != "unhealthy: the store did not answer: connection refused" {
		t.Errorf("/healthz = %q, want what failed in idem's words", msg)
	}
	if !strings.Contains(log.String(), "did not answer") || !strings.Contains(log.String(), database) {
		t.Errorf("the log does not hold the failure with its details:\n%s", log.String())
	}
}
