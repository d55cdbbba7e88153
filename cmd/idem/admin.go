package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/admin/console"
	"github.com/idemhq/idem/audit"
	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/cmd/idem/internal/open"
	"github.com/idemhq/idem/idemhttp/gateway"
	"github.com/idemhq/idem/internal/httpd"
	"github.com/idemhq/idem/internal/redact"
)

// defaultAdminListen is idem admin's address: loopback, as every daemon's default.
const defaultAdminListen = "127.0.0.1:9466"

// adminOptions are the flags of idem admin.
type adminOptions struct {
	listen, db       string
	stores           storeFlags
	token, readToken string
	insecure         bool
	drainLimit       time.Duration
	metricsFrom      metricsFlags
	consumers        open.ConsumerFlags // the audit area's consumers
	audit            open.AuditFlags
	auditWindow      time.Duration
	auditGrace       time.Duration
}

const adminSynopsis = `Serves idem's operator API (package admin) on --listen: JSON under /api/ to
see and act on the idempotency keys of the --store stores, and on the dead
letters, outbox, queue, effects and sagas of the --db database (each area whose
tables are there; the others answer 404 not-configured). GET /api/openapi.json lists
the routes. /metrics (Prometheus) and /healthz (200 while the database and the
stores answer) are served beside it, without a token.

Every /api/ request needs "Authorization: Bearer <token>": --token for full
access, --read-token for GET only. Pass them through the environment
($IDEM_ADMIN_TOKEN, $IDEM_ADMIN_READ_TOKEN), not the command line, which other
users of the machine can read; they are never printed. Without a token the API
listens only on a loopback address, and only with --insecure.

Stores (--store, repeatable; name=URL names one, else it is "default"):
  sqlite:PATH, postgres://…, mysql://…, redis://…   as idem serve's --store
Databases (--db): postgres://…, mysql://… or sqlite:PATH (an existing file).

The console's charts read the metrics of the processes idem admin operates:
--metrics-from URL (repeatable) names a process's /metrics, such as the relay's
(http://127.0.0.1:9464/metrics, its --listen) and the gateway's
(http://127.0.0.1:9465/metrics, idem serve's --admin-listen). Counters are summed
across them; each is read at most once a second, within 2 s and 4 MiB, and one
that does not answer is shown as down in GET /api/metrics and the console.

The audit area (GET /api/audit, POST /api/audit/repair, GET /api/audit/repairs,
the console's audit panel) is on when --consumer names the consumers of the
--db outbox's topics, as idem audit takes them (NAME=TOPIC[,TOPIC...][@DB-URL],
repeatable), with --records-table, --retention, --audit-window and --audit-grace.

SIGINT or SIGTERM stops taking connections and finishes the requests in flight.
Traces go over OTLP when $OTEL_EXPORTER_OTLP_ENDPOINT (and the other standard OTEL_*
variables) is set; log lines under a span carry its trace_id and span_id.`

func (m *Main) runAdmin(ctx context.Context, args []string) error {
	fs := m.newFlagSet("admin", adminSynopsis)
	o := &adminOptions{}
	fs.StringVar(&o.listen, "listen", defaultAdminListen, "address of the API, /metrics and /healthz")
	fs.StringVar(&o.db, "db", "", "the database of the inbox, outbox, effects and sagas: postgres://…, mysql://… or sqlite:PATH  [$IDEM_DB]")
	fs.Var(&o.stores, "store", "an idempotency store to inspect, [name=]URL: sqlite:PATH, postgres://…, mysql://… or redis://…; repeatable")
	fs.StringVar(&o.token, "token", "", "full-access bearer token, 16+ random bytes (openssl rand -hex 32); prefer the environment  [$IDEM_ADMIN_TOKEN]")
	fs.StringVar(&o.readToken, "read-token", "", "read-only bearer token (GET requests only); prefer the environment  [$IDEM_ADMIN_READ_TOKEN]")
	fs.BoolVar(&o.insecure, "insecure", false, "serve without a token: loopback --listen only, for development")
	fs.DurationVar(&o.drainLimit, "shutdown-timeout", 10*time.Second, "how long a stop waits for requests in flight")
	fs.Var(&o.metricsFrom, "metrics-from", "a /metrics URL of a process the console's charts read (http://127.0.0.1:9464/metrics: the relay's); repeatable")
	fs.Var(&o.consumers, "consumer", "the audit area: a consumer of the --db outbox's topics, "+open.ConsumerSyntax+" (as idem audit); repeatable")
	fs.StringVar(&o.audit.RecordsTable, "records-table", "", "the audit area: the consumers' records table (default idem_records)")
	fs.DurationVar(&o.audit.Retention, "retention", audit.DefaultRetention, "the audit area: the consumers' key retention; --audit-window may be at most half of it")
	fs.DurationVar(&o.auditWindow, "audit-window", audit.DefaultWindow, "the audit area: how far back an audit reads")
	fs.DurationVar(&o.auditGrace, "audit-grace", audit.DefaultGrace, "the audit area: how long a message may be on its way before it counts as missing")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	// The environment is read after parsing so that --help never prints a secret.
	o.db = cmp.Or(o.db, os.Getenv("IDEM_DB"))
	o.token = cmp.Or(o.token, os.Getenv("IDEM_ADMIN_TOKEN"))
	o.readToken = cmp.Or(o.readToken, os.Getenv("IDEM_ADMIN_READ_TOKEN"))
	db, err := o.check()
	if err != nil {
		return cli.UsageErr(fs, "%s", redact.String(err.Error()))
	}
	return m.admin(ctx, o, db)
}

// check validates the flags before anything connects; its errors name the flag
// and never quote a token.
func (o *adminOptions) check() (*open.DBSpec, error) {
	cfg := admin.Config{Token: o.token, ReadToken: o.readToken, Insecure: o.insecure}
	if err := o.metricsFrom.check(); err != nil {
		return nil, err
	}
	if len(o.consumers) > 0 && o.db == "" {
		return nil, errors.New("--consumer without --db: the audit reads the outbox of --db; pass it")
	}
	if _, err := o.consumers.Specs(); err != nil {
		return nil, err
	}
	switch {
	case o.db == "" && len(o.stores) == 0:
		return nil, errors.New("nothing to serve: pass --db (the inbox, outbox, effects and sagas) and/or --store (idempotency keys)")
	case o.token == "" && o.readToken == "" && !o.insecure:
		return nil, errors.New("--token is empty (and so is --read-token): set $IDEM_ADMIN_TOKEN to 16+ random bytes " +
			"(openssl rand -hex 32), or pass --insecure to serve without a token on a loopback --listen")
	case o.token != "" && o.insecure:
		return nil, errors.New("--insecure with a token: drop --insecure, the token is used")
	}
	if err := admin.CheckListen(o.listen, cfg); err != nil {
		var ie *idem.InputError
		if errors.As(err, &ie) {
			return nil, fmt.Errorf("--listen %s: %s", ie.Reason, ie.Fix)
		}
		return nil, err
	}
	if _, err := admin.New(cfg); err != nil { // token lengths, a read token equal to the token
		var ie *idem.InputError
		if errors.As(err, &ie) {
			flag := map[string]string{"Config.Token": "--token", "Config.ReadToken": "--read-token"}[ie.Field]
			return nil, fmt.Errorf("%s %s: %s", cmp.Or(flag, ie.Field), ie.Reason, ie.Fix)
		}
		return nil, err
	}
	for _, s := range o.stores {
		if s.spec.Kind == "memory" {
			return nil, fmt.Errorf("--store %s=memory: a memory store lives in its gateway's process: "+
				"run idem serve --admin-token to inspect it", s.name)
		}
	}
	if o.db == "" {
		return nil, nil
	}
	db, err := open.ParseDB(o.db)
	return &db, err
}

// metricsFlags is the repeatable --metrics-from URL. Set keeps every value: they
// are checked after parsing (adminOptions.check), where the message can be
// redacted; the flag package's own quotes the value as given.
type metricsFlags []string

func (f *metricsFlags) String() string { return strings.Join(*f, ",") }

func (f *metricsFlags) Set(v string) error {
	*f = append(*f, v)
	return nil
}

// check checks the URLs as admin.Config.Metrics does; its errors name the flag and
// never quote a URL's password.
func (f metricsFlags) check() error {
	if len(f) > admin.MaxMetricsSources {
		return fmt.Errorf("--metrics-from is given %d times, more than %d: read a Prometheus federation endpoint instead", len(f), admin.MaxMetricsSources)
	}
	for i, v := range f {
		if slices.Contains(f[:i], v) {
			return errors.New(redact.String(fmt.Sprintf("--metrics-from %s is given twice: its counters would be counted twice", v)))
		}
		_, err := admin.New(admin.Config{Insecure: true, Metrics: &admin.MetricsSources{URLs: []string{v}}})
		var ie *idem.InputError
		if errors.As(err, &ie) {
			return errors.New(redact.String("--metrics-from " + ie.Reason + ": " + ie.Fix))
		}
	}
	return nil
}

// storeFlags is the repeatable --store [name=]URL.
type storeFlags []namedStore

type namedStore struct {
	name string
	spec open.StoreSpec
}

func (f *storeFlags) String() string {
	names := make([]string, len(*f))
	for i, s := range *f {
		names[i] = s.name + "=" + s.spec.Desc
	}
	return strings.Join(names, ",")
}

// Set parses name=URL or URL. A name has no ':' (a URL's scheme does), so a URL
// whose query holds '=' is not taken for a name.
func (f *storeFlags) Set(v string) error {
	name, raw := "default", v
	if n, rest, ok := strings.Cut(v, "="); ok && !strings.Contains(n, ":") {
		name, raw = n, rest
	}
	if name == "" || strings.ContainsAny(name, " \t/") {
		return fmt.Errorf("bad store name %q: use letters, digits, '-' or '_', as in main=sqlite:keys.db", name)
	}
	if slices.ContainsFunc(*f, func(s namedStore) bool { return s.name == name }) {
		return fmt.Errorf("two stores named %q: name each, as in --store a=URL --store b=URL", name)
	}
	spec, err := open.ParseStore(raw)
	if err != nil {
		return errors.New(redact.String(err.Error()))
	}
	*f = append(*f, namedStore{name: name, spec: spec})
	return nil
}

// admin connects the stores and the database, then serves until ctx ends.
func (m *Main) admin(ctx context.Context, o *adminOptions, db *open.DBSpec) error {
	log, reg, stopTracing, err := cli.StartDaemon(ctx, m.Stderr, "admin")
	if err != nil {
		return err
	}
	defer stopTracing()
	cfg := admin.Config{Token: o.token, ReadToken: o.readToken, Insecure: o.insecure, Logger: log, Registerer: reg,
		Stores: map[string]idem.Inspector{}}
	var pings []func(context.Context) error
	for _, s := range o.stores {
		store, closeStore, err := s.spec.Open(ctx, nil)
		if err != nil {
			return err
		}
		defer closeStore()
		in, ok := store.(idem.Inspector)
		if !ok {
			return fmt.Errorf("--store %s: this store cannot be inspected", s.spec.Desc)
		}
		cfg.Stores[s.name] = in
		pings = append(pings, inspectPing(in))
	}
	what := fmt.Sprintf("%d store(s)", len(o.stores))
	if len(o.metricsFrom) > 0 {
		what += fmt.Sprintf("; the console's charts read %d /metrics source(s)", len(o.metricsFrom))
	}
	if db != nil {
		ping, closeDB, skipped, err := open.AdminDB(ctx, *db, &cfg)
		if err != nil {
			return err
		}
		defer closeDB()
		pings = append(pings, ping)
		what += ", " + db.Desc
		for _, area := range slices.Sorted(maps.Keys(skipped)) {
			log.Warn("idem admin: area off: its tables are missing or behind", "area", area, "err", skipped[area])
		}
	}
	if len(o.consumers) > 0 {
		specs, _ := o.consumers.Specs() // checked
		a, closeAudit, err := open.Auditor(ctx, o.db, specs, o.audit,
			audit.Config{Window: o.auditWindow, Grace: o.auditGrace, Registerer: reg, Logger: log})
		if err != nil {
			return fmt.Errorf("idem admin: the audit area: %w", err)
		}
		defer closeAudit()
		cfg.Audit = admin.AuditFrom(a)
		what += fmt.Sprintf("; the audit of %d consumer(s)", len(specs))
	}
	cfg.Console, cfg.Gatherer = console.Handler(), reg
	cfg.Metrics = &admin.MetricsSources{URLs: o.metricsFrom} // listed even when empty: the console says how to add one
	api, err := admin.New(cfg)
	if err != nil {
		return fmt.Errorf("idem admin: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", api) // /api/, and the console at /
	probes := adminHandler(reg, pingAll(pings))
	mux.Handle("GET /metrics", probes)
	mux.Handle("GET /healthz", probes)

	srvErr := make(chan error, 1)
	timeouts := httpd.Timeouts{Read: 30 * time.Second, Write: 2 * time.Minute, Idle: 2 * time.Minute}
	srv, addr, err := startServer(o.listen, "--listen", mux, timeouts, log, srvErr)
	if err != nil {
		return err
	}
	defer srv.Close()
	access := "token"
	if o.insecure {
		access = "no token (--insecure)"
	}
	fmt.Fprintf(m.Stderr, "idem admin: listening on %s (console at /, /api/, /metrics, /healthz; %s)\n", addr, access)
	fmt.Fprintf(m.Stderr, "idem admin: serving %s\n", what)
	select {
	case <-ctx.Done():
	case err = <-srvErr:
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.drainLimit)
	defer cancel()
	_ = srv.Shutdown(dctx)
	if err == nil {
		fmt.Fprintln(m.Stderr, "idem admin: stopped")
	}
	return err
}

// inspectPing checks a store by inspecting serve's health key: a read, never a
// write, so the admin can watch a store it must not change.
func inspectPing(in idem.Inspector) func(context.Context) error {
	return func(ctx context.Context) error {
		if _, err := in.Inspect(ctx, gateway.HealthKey); err != nil && !errors.Is(err, idem.ErrNotFound) {
			return err
		}
		return nil
	}
}

// pingAll answers /healthz: healthy while every ping answers within 3 s.
func pingAll(pings []func(context.Context) error) func(context.Context) (bool, string) {
	return func(ctx context.Context) (bool, string) {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		for _, ping := range pings {
			if err := ping(ctx); err != nil {
				return false, "unhealthy: a backend did not answer: " + cli.ReasonOf(err)
			}
		}
		return true, "ok"
	}
}

// adminAPI mounts the admin API of cfg (with the full-access token, from
// --admin-token) at /api/ of a daemon's admin listener, and the console at /;
// next keeps /metrics and /healthz.
func adminAPI(token string, cfg admin.Config, next http.Handler) (http.Handler, error) {
	cfg.Token = token
	cfg.Console = console.Handler()
	if g, ok := cfg.Registerer.(prometheus.Gatherer); ok {
		cfg.Gatherer = g // the console's charts: this daemon's own metrics
	}
	api, err := admin.New(cfg)
	if err != nil {
		var ie *idem.InputError
		if errors.As(err, &ie) && ie.Field == "Config.Token" {
			return nil, fmt.Errorf("--admin-token %s: %s", ie.Reason, ie.Fix)
		}
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", next)
	mux.Handle("/healthz", next)
	mux.Handle("/", api)
	return mux, nil
}

// checkAdminToken checks serve's and relay's --admin-token before anything
// connects; listen is the admin listener's address ("" for none).
func checkAdminToken(token, listenFlag, listen string) error {
	switch {
	case token == "":
		return nil
	case len(token) < admin.MinTokenLen:
		return fmt.Errorf("--admin-token is shorter than %d bytes: use a random token, such as openssl rand -hex 32", admin.MinTokenLen)
	case listen == "":
		return fmt.Errorf("--admin-token is set but %s is empty: the admin API is served on that listener", listenFlag)
	}
	return nil
}

// serveAdminAPI mounts the keys area of serve's store on its admin listener.
func serveAdminAPI(token string, store idem.Store, reg prometheus.Registerer, log *slog.Logger, next http.Handler) (http.Handler, error) {
	in, ok := store.(idem.Inspector)
	if !ok {
		return nil, errors.New("--admin-token: this store cannot be inspected")
	}
	return adminAPI(token, admin.Config{Stores: map[string]idem.Inspector{"default": in}, Registerer: reg, Logger: log}, next)
}

// relayAdminAPI mounts the outbox area of relay's --db on its --listen.
func relayAdminAPI(token string, ob admin.Outbox, reg prometheus.Registerer, log *slog.Logger, next http.Handler) (http.Handler, error) {
	return adminAPI(token, admin.Config{Outbox: ob, Registerer: reg, Logger: log}, next)
}

// startServer listens on addr and serves h in the background; a failure of Serve
// lands on errs. flagName names the address in errors.
func startServer(addr, flagName string, h http.Handler, to httpd.Timeouts, log *slog.Logger, errs chan<- error) (*http.Server, string, error) {
	ln, err := listen(addr, flagName)
	if err != nil {
		return nil, "", err
	}
	srv := httpd.Serve(ln, h, to, log, func(err error) { errs <- fmt.Errorf("%s %s: %w", flagName, addr, err) })
	return srv, ln.Addr().String(), nil
}
