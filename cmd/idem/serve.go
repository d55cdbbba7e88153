package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemhttp/gateway"
	"github.com/idemhq/idem/internal/redact"
)

// serveOptions are the flags of idem serve.
type serveOptions struct {
	listen, admin, upstream, store     string
	adminToken                         string
	scopeHeader, oversize, methods     string
	fingerprintHeaders, replayHeaders  string
	credentialHeaders                  string
	credentialCookies                  string
	requireKey, store5xx, trustScope   bool
	requireTimedKeys                   bool
	keyHeader, keyJSONField            string
	allowCommonKeyField                bool
	wait, lease, retention, drainLimit time.Duration
	keyMaxAge                          time.Duration
	upstreamTimeout, readTimeout       time.Duration
	writeTimeout, idleTimeout          time.Duration
	maxBody                            byteSize
	maxInFlight, maxConns              int
	webhook                            string
}

const serveSynopsis = `A reverse proxy to --upstream that makes any HTTP API safe to retry: a POST or
PATCH with an Idempotency-Key header runs the upstream once, and every retry gets
the stored response again (status, headers but Set-Cookie, Date and hop-by-hop
ones, body; Idempotent-Replayed: true). The same key with another method, path,
query or body gets 422; a retry while the first runs, 409 with Retry-After (or,
with --wait, the replay): the gateway renews the key's --lease while the upstream
works, so a slow upstream is never run twice. A response over --max-body reaches
its client but is not stored: a retry gets 500 (response-too-large), not a rerun.

Late requests are refused, not run: a UUIDv7 or ULID key made longer ago than
--key-max-age (default --retention) gets 410 (key-expired), since its record may
be forgotten; one dated over 1m ahead of this clock, 400 (key-from-future); a
request whose Idem-Deadline header (RFC 3339, set by idemhttp.Transport) has
passed, 412 (deadline-passed). Keys without a time (UUIDv4, free text) cannot be
judged and run again after --retention, unless --require-timed-keys refuses them
(400). Callers must stop retrying within --retention; /metrics counts refusals in
idem_http_refused_total{reason}.

Keys are scoped by a SHA-256 hash of the credentials a request carries
(Authorization, Proxy-Authorization, Cookie and --credential-headers, default
X-Api-Key; never stored in clear): a caller never receives a response stored for
other credentials. --scope-header X-Tenant adds a tenant header to that hash;
--trust-scope-header uses the header alone, which is safe only behind a trusted
proxy that authenticates callers and sets (and strips) that header.

Limits: an upstream call ends after --upstream-timeout (60s): the client gets 504
and the key is released, not stored, so a retry runs again. Clients must send
their request within --read-timeout (30s) and take their response within
--write-timeout; idle connections close after --idle-timeout. At most
--max-inflight (256) keyed requests are read or run at once; more get 503 with
Retry-After before their body is read. Each holds at most about 3 x --max-body
(request, response and stored copy): about 256 x 3.2 MiB = 820 MiB with the defaults,
plus the store's own memory with --store memory: (max_bytes, 512MiB). At most
--max-conns (4096) client connections are open at once; more wait to be accepted.
Userinfo in --upstream
(http://user:pw@host) is sent as basic auth when the client sends no
Authorization; it is never printed.

Stores (--store):
  sqlite:PATH                         a file, created if missing (default); one gateway per file
  postgres://user:pass@host:5432/db   shared by several gateways; pool size with ?pool_max_conns=N
  mysql://user:pass@host:3306/db      MySQL 8.0 or MariaDB 10.6+, shared by several gateways
  redis://host:6379[/db][?prefix=P]   shared by several gateways; keys start with P (default idem:)
  memory:[?max_bytes=512MiB]          forgotten on restart: for tests and single-use setups; new keys
                                      get 503 once its records take max_bytes (default 512MiB)

Webhooks (--webhook standard|stripe|github): the gateway fronts a webhook endpoint
instead. Every POST's signature is verified with the secrets in
$IDEM_WEBHOOK_SECRET (comma-separated while rotating; read from the environment
only, never printed): a forged, stale or unsigned delivery gets 400 and reaches
neither the store nor the upstream. The upstream then runs once per event id
(webhook-id, the Stripe event's "id", X-GitHub-Delivery), sent on as
Idempotency-Key; the sender's retries get its answer replayed, a copy that
arrives while it runs gets 409 with Retry-After (a non-2xx: the sender retries),
and an upstream 5xx or 429 lets the next retry run again. --retention defaults to
7 days and may not be shorter than the sender's retry horizon (Stripe 72h).

--admin-listen serves /metrics and /healthz (200 while the store answers a claim of
a reserved key, 503 otherwise) apart from the proxied address, so no upstream path
is shadowed. Flags also read $IDEM_<FLAG> ('-' as '_': IDEM_UPSTREAM, IDEM_STORE_5XX);
the command line wins. SIGINT or SIGTERM stops taking connections, finishes the
requests in flight (up to --shutdown-timeout) and exits 0.
Traces go over OTLP when $OTEL_EXPORTER_OTLP_ENDPOINT (and the other standard OTEL_*
variables) is set; log lines under a span carry its trace_id and span_id.`

func (m *Main) runServe(ctx context.Context, args []string) error {
	fs, o := m.serveFlags()
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	// The environment is read after parsing, so --help shows the defaults, not it.
	if err := cli.ApplyEnv(fs, os.LookupEnv); err != nil {
		return cli.UsageErr(fs, "%v", err)
	}
	spec, err := o.check()
	if err == nil {
		err = checkAdminToken(o.adminToken, "--admin-listen", o.admin)
	}
	if err == nil {
		spec.webhook, err = checkWebhook(fs, o, os.LookupEnv)
	}
	if err != nil {
		return cli.UsageErr(fs, "%v", err)
	}
	spec.store.KeepKeys = o.adminToken != ""
	return m.serve(ctx, o, spec)
}

// serveFlags returns the flag set of idem serve and the options it fills.
func (m *Main) serveFlags() (*flag.FlagSet, *serveOptions) {
	fs := m.newFlagSet("serve", serveSynopsis)
	o := &serveOptions{maxBody: idemhttp.DefaultMaxBodyBytes}
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "address the gateway serves on (:8080 for every interface)")
	fs.StringVar(&o.upstream, "upstream", "", "URL of the service behind the gateway, such as http://127.0.0.1:9000 (required)")
	fs.StringVar(&o.store, "store", "sqlite:idem-gateway.db", "where keys and responses are kept: sqlite:PATH, postgres://…, mysql://…, redis://… or memory:")
	fs.StringVar(&o.admin, "admin-listen", "127.0.0.1:9465", "address of /metrics and /healthz; empty for none")
	fs.StringVar(&o.adminToken, "admin-token", "", "serve the admin API (the store's keys) at /api/ of --admin-listen with this bearer token, 16+ random bytes; prefer $IDEM_ADMIN_TOKEN")
	fs.StringVar(&o.scopeHeader, "scope-header", "", "also scope keys by this tenant header (requests without it get 400), combined with the caller's credentials")
	fs.BoolVar(&o.trustScope, "trust-scope-header", false, "scope keys by --scope-header alone, without the credentials: only behind a trusted proxy that authenticates callers and sets (and strips) this header")
	fs.StringVar(&o.credentialCookies, "credential-cookies", "", "comma-separated cookie names that identify a caller (such as sid); when set, only they of the Cookie header are hashed into the scope, so other cookies may change between retries")
	fs.StringVar(&o.credentialHeaders, "credential-headers", "X-Api-Key", "comma-separated request headers that carry credentials, hashed into the scope beside Authorization, Proxy-Authorization and Cookie")
	fs.BoolVar(&o.requireKey, "require-key", false, "answer 400 to POST and PATCH requests without an Idempotency-Key instead of passing them through")
	fs.StringVar(&o.keyHeader, "key-header", "", "take the key from this request header instead of Idempotency-Key, such as webhook-id for Standard Webhooks senders")
	fs.StringVar(&o.keyJSONField, "key-json-field", "", "take the key from this top-level field of the JSON request body instead of Idempotency-Key, such as id for Stripe events; the field must be unique per request")
	fs.BoolVar(&o.allowCommonKeyField, "allow-common-key-field", false, "accept a --key-json-field that distinct requests commonly share (type, status, order_id …): only if it is unique in your API")
	fs.DurationVar(&o.wait, "wait", 0, "how long a retry waits for its key's first request to finish, then replays; 0 answers 409 at once")
	fs.Var(&o.maxBody, "max-body", "largest request or response body kept for replay, such as 1MiB or 65536")
	fs.StringVar(&o.oversize, "oversize", "reject", "a body over --max-body: 'reject' (413) or 'pass' (proxied without idempotency)")
	fs.DurationVar(&o.retention, "retention", idem.DefaultRetention, "how long a response is replayed; retries after it run again")
	fs.DurationVar(&o.keyMaxAge, "key-max-age", 0, "refuse (410) a UUIDv7 or ULID key made longer ago than this; 0 for --retention, negative to run such late retries again")
	fs.BoolVar(&o.requireTimedKeys, "require-timed-keys", false, "refuse (400) keys that carry no time (not a UUIDv7 or ULID), so every late retry can be told apart; for callers that all send timed keys")
	fs.DurationVar(&o.lease, "lease", idem.DefaultLease, "how long a key stays claimed after its gateway was last heard of: renewed every third of it while the upstream works, so it frees only a crashed gateway's keys")
	fs.BoolVar(&o.store5xx, "store-5xx", true, "replay the upstream's 5xx responses like any other (Stripe's choice); false lets a retry run again")
	fs.StringVar(&o.methods, "methods", "POST,PATCH", "comma-separated methods that take an Idempotency-Key; others pass through untouched")
	fs.StringVar(&o.fingerprintHeaders, "fingerprint-headers", "", "comma-separated request headers that are part of a request's identity, beside method, path, query and body")
	fs.StringVar(&o.replayHeaders, "replay-headers", "", "comma-separated allow-list of response headers stored and replayed; default: every header but hop-by-hop ones, Content-Length, Date, Set-Cookie, Alt-Svc, Proxy-Authenticate and Strict-Transport-Security")
	fs.DurationVar(&o.drainLimit, "shutdown-timeout", 30*time.Second, "how long a stop waits for requests in flight before cutting them")
	fs.IntVar(&o.maxConns, "max-conns", gateway.DefaultMaxConns, "most client connections open at once on --listen; more wait in the kernel's accept queue")
	fs.IntVar(&o.maxInFlight, "max-inflight", idemhttp.DefaultMaxInFlight, "most requests with an Idempotency-Key read or run at once; beyond it 503 with Retry-After, before the body is read")
	fs.DurationVar(&o.upstreamTimeout, "upstream-timeout", 60*time.Second, "longest an upstream call may take, response body included; then 504 and the key is released (not stored)")
	fs.DurationVar(&o.readTimeout, "read-timeout", 30*time.Second, "longest a client may take to send a request, headers and body")
	fs.DurationVar(&o.writeTimeout, "write-timeout", 0, "longest from a request's headers to the end of its response; must exceed --upstream-timeout + --wait; 0 for --read-timeout + --upstream-timeout + --wait + 5s")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", 2*time.Minute, "how long an idle keep-alive connection is kept open")
	fs.StringVar(&o.webhook, "webhook", "", "front a webhook endpoint: standard (Standard Webhooks, Svix), stripe or github; each POST's signature is verified with the secrets of $IDEM_WEBHOOK_SECRET (comma-separated), then the upstream runs once per event id; --retention defaults to 7 days")
	return fs, o
}

// serve runs the gateway until ctx ends, then stops taking connections, finishes the
// requests in flight, stops the sweeper and closes the store, in that order.
func (m *Main) serve(ctx context.Context, o *serveOptions, spec serveSpec) error {
	log, reg, stopTracing, err := cli.StartDaemon(ctx, m.Stderr, "serve")
	if err != nil {
		return err
	}
	defer stopTracing()
	// The store's own metrics label claims by scope, which behind the gateway is one
	// value per caller (an Authorization hash or a tenant): unbounded. The gateway
	// exports the middleware's metrics, labelled by outcome only.
	store, closeStore, err := spec.store.Open(ctx, nil)
	if err != nil {
		return err
	}
	defer closeStore()
	g, err := spec.gateway(o, store, reg, log)
	if err != nil {
		return err
	}
	ln, adminLn, err := listenBoth(o.listen, o.admin)
	if err != nil {
		return err
	}
	srvErr := g.Serve(ctx, ln, adminLn)
	adminAddr := "off"
	if adminLn != nil {
		adminAddr = adminLn.Addr().String()
	}
	fmt.Fprintf(m.Stderr, "idem serve: listening on %s (admin %s)\n", ln.Addr(), adminAddr)
	fmt.Fprintf(m.Stderr, "idem serve: proxying to %s, keys in %s\n", redact.URL(spec.upstream.String()), spec.store.Desc)
	if w := spec.webhook; w != nil {
		fmt.Fprintf(m.Stderr, "idem serve: verifying %s webhooks with %d secret(s) from $%s, one upstream call per event id\n", w.kind, w.secrets, envWebhookSecret)
	}
	select {
	case <-ctx.Done():
	case err = <-srvErr:
		err = o.serveFailure(err)
	}
	fmt.Fprintf(m.Stderr, "idem serve: shutting down, finishing the requests in flight (up to %v)\n", o.drainLimit)
	_ = g.Close()
	if err == nil {
		fmt.Fprintln(m.Stderr, "idem serve: stopped")
	}
	return err
}

// gateway builds the gateway over store: the webhook receiver with --webhook, the
// Idempotency-Key middleware otherwise; its admin listener serves /metrics,
// /healthz and, with --admin-token, the admin API of the store's keys.
func (s serveSpec) gateway(o *serveOptions, store idem.Store, reg *prometheus.Registry, log *slog.Logger) (*gateway.Gateway, error) {
	cfg := gateway.Config{Upstream: s.upstream, Store: store, Idempotency: s.cfg,
		UpstreamTimeout: o.upstreamTimeout, ReadTimeout: o.readTimeout, WriteTimeout: o.writeTimeout, IdleTimeout: o.idleTimeout,
		MaxConns: o.maxConns, ShutdownTimeout: o.drainLimit, Registerer: reg, Logger: log, Reason: cli.ReasonOf}
	if s.webhook != nil {
		w := s.webhook.config(o)
		cfg.Webhook = &w
	}
	if o.admin != "" {
		cfg.Admin = adminHandler(reg, gateway.StoreHealth(store, log, cli.ReasonOf))
	}
	if o.admin != "" && o.adminToken != "" {
		var err error
		if cfg.Admin, err = serveAdminAPI(o.adminToken, store, reg, log, cfg.Admin); err != nil {
			return nil, err
		}
	}
	g, err := gateway.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("idem serve: %w", keySourceFlags(err))
	}
	return g, nil
}

// serveFailure names the listener of a *gateway.ServeError by its flag.
func (o *serveOptions) serveFailure(err error) error {
	se, ok := errors.AsType[*gateway.ServeError](err)
	if !ok {
		return err
	}
	flag, addr := "--listen", o.listen
	if se.Admin {
		flag, addr = "--admin-listen", o.admin
	}
	return fmt.Errorf("%s %s: %w", flag, addr, se.Err)
}

// listenBoth listens on the gateway's address and, unless it is empty, on its admin
// address; errors name the flag.
func listenBoth(addr, adminAddr string) (ln, adminLn net.Listener, err error) {
	if ln, err = listen(addr, "--listen"); err != nil || adminAddr == "" {
		return ln, nil, err
	}
	if adminLn, err = listen(adminAddr, "--admin-listen"); err != nil {
		ln.Close()
	}
	return ln, adminLn, err
}

// listen listens on addr; an error names flagName.
func listen(addr, flagName string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flagName, addr, err)
	}
	return ln, nil
}
