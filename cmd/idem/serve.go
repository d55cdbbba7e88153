package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/net/netutil"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/redact"
)

// serveOptions are the flags of idem serve.
type serveOptions struct {
	listen, admin, upstream, store     string
	scopeHeader, oversize, methods     string
	fingerprintHeaders, replayHeaders  string
	credentialHeaders                  string
	credentialCookies                  string
	requireKey, store5xx, trustScope   bool
	wait, lease, retention, drainLimit time.Duration
	upstreamTimeout, readTimeout       time.Duration
	writeTimeout, idleTimeout          time.Duration
	maxBody                            byteSize
	maxInFlight, maxConns              int
}

const serveSynopsis = `A reverse proxy to --upstream that makes any HTTP API safe to retry: a POST or
PATCH with an Idempotency-Key header runs the upstream once, and every retry gets
the stored response again (status, headers but Set-Cookie, Date and hop-by-hop
ones, body; Idempotent-Replayed: true). The same key with another method, path,
query or body gets 422; a retry while the first runs, 409 with Retry-After (or,
with --wait, the replay): the gateway renews the key's --lease while the upstream
works, so a slow upstream is never run twice. A response over --max-body reaches
its client but is not stored: a retry gets 500 (response-too-large), not a rerun.

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
  redis://host:6379[/db][?prefix=P]   shared by several gateways; keys start with P (default idem:)
  memory:[?max_bytes=512MiB]          forgotten on restart: for tests and single-use setups; new keys
                                      get 503 once its records take max_bytes (default 512MiB)

--admin-listen serves /metrics and /healthz (200 while the store answers a claim of
a reserved key, 503 otherwise) apart from the proxied address, so no upstream path
is shadowed. Flags also read $IDEM_<FLAG> ('-' as '_': IDEM_UPSTREAM, IDEM_STORE_5XX);
the command line wins. SIGINT or SIGTERM stops taking connections, finishes the
requests in flight (up to --shutdown-timeout) and exits 0.`

func (m *Main) runServe(ctx context.Context, args []string) error {
	fs, o := m.serveFlags()
	if err := parse(fs, args); err != nil {
		return err
	}
	// The environment is read after parsing, so --help shows the defaults, not it.
	if err := applyEnv(fs, os.LookupEnv); err != nil {
		return usageErr(fs, "%v", err)
	}
	spec, err := o.check()
	if err != nil {
		return usageErr(fs, "%v", err)
	}
	return m.serve(ctx, o, spec)
}

// serveFlags returns the flag set of idem serve and the options it fills.
func (m *Main) serveFlags() (*flag.FlagSet, *serveOptions) {
	fs := m.newFlagSet("serve", serveSynopsis)
	o := &serveOptions{maxBody: idemhttp.DefaultMaxBodyBytes}
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "address the gateway serves on (:8080 for every interface)")
	fs.StringVar(&o.upstream, "upstream", "", "URL of the service behind the gateway, such as http://127.0.0.1:9000 (required)")
	fs.StringVar(&o.store, "store", "sqlite:idem-gateway.db", "where keys and responses are kept: sqlite:PATH, postgres://…, redis://… or memory:")
	fs.StringVar(&o.admin, "admin-listen", "127.0.0.1:9465", "address of /metrics and /healthz; empty for none")
	fs.StringVar(&o.scopeHeader, "scope-header", "", "also scope keys by this tenant header (requests without it get 400), combined with the caller's credentials")
	fs.BoolVar(&o.trustScope, "trust-scope-header", false, "scope keys by --scope-header alone, without the credentials: only behind a trusted proxy that authenticates callers and sets (and strips) this header")
	fs.StringVar(&o.credentialCookies, "credential-cookies", "", "comma-separated cookie names that identify a caller (such as sid); when set, only they of the Cookie header are hashed into the scope, so other cookies may change between retries")
	fs.StringVar(&o.credentialHeaders, "credential-headers", "X-Api-Key", "comma-separated request headers that carry credentials, hashed into the scope beside Authorization, Proxy-Authorization and Cookie")
	fs.BoolVar(&o.requireKey, "require-key", false, "answer 400 to POST and PATCH requests without an Idempotency-Key instead of passing them through")
	fs.DurationVar(&o.wait, "wait", 0, "how long a retry waits for its key's first request to finish, then replays; 0 answers 409 at once")
	fs.Var(&o.maxBody, "max-body", "largest request or response body kept for replay, such as 1MiB or 65536")
	fs.StringVar(&o.oversize, "oversize", "reject", "a body over --max-body: 'reject' (413) or 'pass' (proxied without idempotency)")
	fs.DurationVar(&o.retention, "retention", idem.DefaultRetention, "how long a response is replayed; retries after it run again")
	fs.DurationVar(&o.lease, "lease", idem.DefaultLease, "how long a key stays claimed after its gateway was last heard of: renewed every third of it while the upstream works, so it frees only a crashed gateway's keys")
	fs.BoolVar(&o.store5xx, "store-5xx", true, "replay the upstream's 5xx responses like any other (Stripe's choice); false lets a retry run again")
	fs.StringVar(&o.methods, "methods", "POST,PATCH", "comma-separated methods that take an Idempotency-Key; others pass through untouched")
	fs.StringVar(&o.fingerprintHeaders, "fingerprint-headers", "", "comma-separated request headers that are part of a request's identity, beside method, path, query and body")
	fs.StringVar(&o.replayHeaders, "replay-headers", "", "comma-separated allow-list of response headers stored and replayed; default: every header but hop-by-hop ones, Content-Length, Date, Set-Cookie, Alt-Svc, Proxy-Authenticate and Strict-Transport-Security")
	fs.DurationVar(&o.drainLimit, "shutdown-timeout", 30*time.Second, "how long a stop waits for requests in flight before cutting them")
	fs.IntVar(&o.maxConns, "max-conns", defaultMaxConns, "most client connections open at once on --listen; more wait in the kernel's accept queue")
	fs.IntVar(&o.maxInFlight, "max-inflight", idemhttp.DefaultMaxInFlight, "most requests with an Idempotency-Key read or run at once; beyond it 503 with Retry-After, before the body is read")
	fs.DurationVar(&o.upstreamTimeout, "upstream-timeout", 60*time.Second, "longest an upstream call may take, response body included; then 504 and the key is released (not stored)")
	fs.DurationVar(&o.readTimeout, "read-timeout", 30*time.Second, "longest a client may take to send a request, headers and body")
	fs.DurationVar(&o.writeTimeout, "write-timeout", 0, "longest from a request's headers to the end of its response; must exceed --upstream-timeout + --wait; 0 for --read-timeout + --upstream-timeout + --wait + 5s")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", 2*time.Minute, "how long an idle keep-alive connection is kept open")
	return fs, o
}

// applyEnv sets every flag that the command line left alone from $IDEM_<FLAG>, if
// present (an empty value counts: IDEM_ADMIN_LISTEN= turns the admin listener off).
func applyEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := "IDEM_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		v, ok := lookup(name)
		if given[f.Name] || !ok || err != nil {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = fmt.Errorf("$%s (--%s) = %q: %v", name, f.Name, v, serr)
		}
	})
	return err
}

// serveSpec is what check derived from the flags: the middleware's configuration
// without its store, registry and logger, which serve supplies.
type serveSpec struct {
	upstream *url.URL
	store    storeSpec
	cfg      idemhttp.Config
}

var tokenRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$") // RFC 9110 token

// check validates the flags before anything connects; its errors name the flag.
func (o *serveOptions) check() (serveSpec, error) {
	var s serveSpec
	if o.upstream == "" {
		return s, errors.New("--upstream is required: the URL of the service behind the gateway, such as http://127.0.0.1:9000 (or set $IDEM_UPSTREAM)")
	}
	u, err := url.Parse(o.upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return s, fmt.Errorf("--upstream %q: not an http:// or https:// URL with a host; use http://host:port[/base-path]", redactURL(o.upstream))
	}
	s.upstream = u
	for _, a := range [][2]string{{"--listen", o.listen}, {"--admin-listen", o.admin}} {
		if _, _, err := net.SplitHostPort(a[1]); err != nil && (a[1] != "" || a[0] == "--listen") {
			return s, fmt.Errorf("%s %q: %v: use host:port, such as 127.0.0.1:8080 or :8080", a[0], a[1], err)
		}
	}
	if s.store, err = parseStore(o.store); err != nil {
		return s, err
	}
	switch {
	case o.wait < 0:
		return s, fmt.Errorf("--wait must be 0 (answer 409) or positive, such as 10s (got %v)", o.wait)
	case o.lease <= 0:
		return s, fmt.Errorf("--lease must be positive, such as 30s (got %v)", o.lease)
	case o.retention <= 0:
		return s, fmt.Errorf("--retention must be positive, such as 24h (got %v)", o.retention)
	case o.drainLimit <= 0:
		return s, fmt.Errorf("--shutdown-timeout must be positive, such as 30s (got %v)", o.drainLimit)
	case o.maxBody <= 0:
		return s, fmt.Errorf("--max-body must be positive, such as 1MiB (got %d)", o.maxBody)
	case o.maxConns <= 0:
		return s, fmt.Errorf("--max-conns must be positive, such as %d (got %d)", defaultMaxConns, o.maxConns)
	case o.maxInFlight <= 0:
		return s, fmt.Errorf("--max-inflight must be positive, such as %d (got %d)", idemhttp.DefaultMaxInFlight, o.maxInFlight)
	case o.upstreamTimeout <= 0:
		return s, fmt.Errorf("--upstream-timeout must be positive, such as 60s (got %v)", o.upstreamTimeout)
	case o.readTimeout <= 0 || o.idleTimeout <= 0:
		return s, fmt.Errorf("--read-timeout and --idle-timeout must be positive, such as 30s and 2m (got %v and %v)", o.readTimeout, o.idleTimeout)
	case o.writeTimeout < 0:
		return s, fmt.Errorf("--write-timeout must be positive, or 0 for the default (got %v)", o.writeTimeout)
	case o.writeTimeout == 0:
		o.writeTimeout = o.readTimeout + o.upstreamTimeout + o.wait + 5*time.Second
	case o.writeTimeout <= o.upstreamTimeout+o.wait:
		// net/http's write deadline runs from the end of the request's headers: it
		// must leave room for the upstream call (and the wait before it), or a slow
		// but successful upstream's response is cut and never reaches the client.
		return s, fmt.Errorf("--write-timeout %v must be longer than --upstream-timeout + --wait (%v + %v = %v), which it covers (with the time to read the body): raise it, such as to %v",
			o.writeTimeout, o.upstreamTimeout, o.wait, o.upstreamTimeout+o.wait, o.readTimeout+o.upstreamTimeout+o.wait+5*time.Second)
	}
	s.cfg, err = o.middlewareConfig()
	return s, err
}

// middlewareConfig maps the flags to the middleware's configuration, checked.
func (o *serveOptions) middlewareConfig() (idemhttp.Config, error) {
	c := idemhttp.Config{RequireKey: o.requireKey, Wait: o.wait, Lease: o.lease, Retention: o.retention,
		MaxBodyBytes: int64(o.maxBody), StoreServerErrors: &o.store5xx, MaxInFlight: o.maxInFlight}
	switch o.oversize {
	case "reject":
		c.Oversize = idemhttp.Reject413
	case "pass":
		c.Oversize = idemhttp.PassThrough
	default:
		return c, fmt.Errorf("--oversize %q: use 'reject' (413) or 'pass' (proxied without idempotency)", o.oversize)
	}
	var err error
	c.Methods, err = headerList("--methods", o.methods, true)
	if err == nil && len(c.Methods) == 0 {
		err = errors.New("--methods is empty: list the methods that take an Idempotency-Key, such as POST,PATCH")
	}
	for _, m := range c.Methods {
		if m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions {
			err = fmt.Errorf("--methods lists %s, which is safe by HTTP semantics and must not be replayed from a store: list methods with effects, such as POST,PATCH", m)
		}
	}
	if err == nil {
		c.FingerprintHeaders, err = headerList("--fingerprint-headers", o.fingerprintHeaders, false)
	}
	if err == nil {
		c.ReplayHeaders, err = headerList("--replay-headers", o.replayHeaders, false)
	}
	if err == nil {
		c.CredentialHeaders, err = headerList("--credential-headers", o.credentialHeaders, false)
		if c.CredentialHeaders == nil {
			c.CredentialHeaders = []string{} // none beside the three always hashed
		}
	}
	if err == nil {
		// Cookie names are tokens too (RFC 6265 §4.1.1).
		c.CredentialCookies, err = headerList("--credential-cookies", o.credentialCookies, false)
	}
	if err != nil {
		return c, err
	}
	if h := o.scopeHeader; h != "" {
		switch {
		case !tokenRE.MatchString(h):
			return c, fmt.Errorf("--scope-header %q is not an HTTP header name", h)
		case slices.Contains([]string{"authorization", "proxy-authorization", "cookie"}, strings.ToLower(h)):
			return c, fmt.Errorf("--scope-header %s would store credentials in clear: leave it out, the default scope is a hash of every credential the request carries", h)
		}
		c.Scope = idemhttp.TenantScope(h, idemhttp.CookieCredentialScope(c.CredentialCookies, c.CredentialHeaders...))
		if o.trustScope {
			c.Scope = idemhttp.TrustedHeaderScope(h)
		}
	} else if o.trustScope {
		return c, errors.New("--trust-scope-header needs --scope-header: name the header your trusted proxy sets")
	}
	return c, nil
}

// headerList splits a comma-separated flag into HTTP tokens (upper-cased for methods);
// empty gives nil, the middleware's default.
func headerList(flagName, v string, upper bool) ([]string, error) {
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if !tokenRE.MatchString(f) {
			return nil, fmt.Errorf("%s: %q is not an HTTP token; separate names with commas", flagName, f)
		}
		if upper {
			f = strings.ToUpper(f)
		}
		out = append(out, f)
	}
	return out, nil
}

// serve runs the gateway until ctx ends, then stops taking connections, finishes the
// requests in flight, stops the sweeper and closes the store, in that order.
func (m *Main) serve(ctx context.Context, o *serveOptions, spec serveSpec) error {
	log := slog.New(redact.Handler(slog.NewTextHandler(m.Stderr, nil)))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// The store's own metrics label claims by scope, which behind the gateway is one
	// value per caller (an Authorization hash or a tenant): unbounded. The gateway
	// exports the middleware's metrics, labelled by outcome only.
	store, closeStore, err := spec.store.open(ctx, nil)
	if err != nil {
		return err
	}
	defer closeStore()
	cfg := spec.cfg
	cfg.Store, cfg.Registerer, cfg.Logger = store, reg, log
	mw, err := idemhttp.Middleware(cfg)
	if err != nil {
		return fmt.Errorf("idem serve: %w", err)
	}

	srvErr := make(chan error, 2)
	timeouts := serverTimeouts{read: o.readTimeout, write: o.writeTimeout, idle: o.idleTimeout, maxConns: o.maxConns}
	proxy := bounded(newProxy(spec.upstream, o.upstreamTimeout, log), o.upstreamTimeout)
	srv, addr, err := startServer(o.listen, "--listen", catchUnreached(mw(proxy)), timeouts, log, srvErr)
	if err != nil {
		return err
	}
	defer srv.Close()
	admin, adminAddr := (*http.Server)(nil), "off"
	if o.admin != "" {
		if admin, adminAddr, err = startServer(o.admin, "--admin-listen", adminHandler(reg, storeHealth(store)), timeouts, log, srvErr); err != nil {
			return err
		}
		defer admin.Close()
	}
	fmt.Fprintf(m.Stderr, "idem serve: listening on %s (admin %s)\n", addr, adminAddr)
	fmt.Fprintf(m.Stderr, "idem serve: proxying to %s, keys in %s\n", redactURL(spec.upstream.String()), spec.store.desc)

	sweepCtx, stopSweep := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	if sw, ok := store.(idem.Sweeper); ok {
		wg.Go(func() { _ = idem.RunSweeper(sweepCtx, sw, time.Minute, log) })
	}

	select {
	case <-ctx.Done():
	case err = <-srvErr:
	}
	fmt.Fprintf(m.Stderr, "idem serve: shutting down, finishing the requests in flight (up to %v)\n", o.drainLimit)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.drainLimit)
	defer cancel()
	if derr := srv.Shutdown(dctx); derr != nil {
		_ = srv.Close()
		log.Warn("idem serve: connections of requests still running at --shutdown-timeout were closed; "+
			"a key whose response was not stored is free again when its lease ends", "err", derr, "lease", o.lease)
	}
	if admin != nil {
		_ = admin.Shutdown(dctx)
	}
	stopSweep()
	wg.Wait()
	if err == nil {
		fmt.Fprintln(m.Stderr, "idem serve: stopped")
	}
	return err
}

// serverTimeouts are the http.Server timeouts of the gateway and of its admin
// listener: a client that sends its request slowly (--read-timeout), or reads its
// response slowly (--write-timeout), or keeps an idle connection (--idle-timeout),
// is cut off instead of holding a goroutine and a descriptor forever.
type serverTimeouts struct {
	read, write, idle time.Duration
	maxConns          int // open connections; 0 for no bound (the admin listener)
}

// defaultMaxConns bounds the gateway's client connections (--max-conns): each costs
// a goroutine and its buffers, about 16 KiB idle, so 4,096 hold about 64 MiB, beside
// the file descriptors (raise ulimit -n above it).
const defaultMaxConns = 4096

// startServer listens on addr and serves h in the background; a failure of Serve
// lands on errs. flagName names the address in errors.
func startServer(addr, flagName string, h http.Handler, to serverTimeouts, log *slog.Logger, errs chan<- error) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("%s %s: %w", flagName, addr, err)
	}
	if to.maxConns > 0 {
		// Beyond the bound, Accept waits: new clients queue in the kernel's backlog
		// until a connection closes, instead of costing a goroutine each.
		ln = netutil.LimitListener(ln, to.maxConns)
	}
	// No BaseContext from ctx: a stop must not cancel the requests it lets finish.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: min(10*time.Second, to.read),
		ReadTimeout: to.read, WriteTimeout: to.write, IdleTimeout: to.idle,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			errs <- fmt.Errorf("%s %s: %w", flagName, addr, err)
		}
	}()
	return srv, ln.Addr().String(), nil
}

// byteSize is a flag holding a size in bytes, written as a number with an optional
// KiB, MiB or GiB suffix.
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(s string) error {
	num, mult := strings.TrimSpace(s), int64(1)
	for i, suffix := range []string{"KiB", "MiB", "GiB"} {
		if rest, ok := strings.CutSuffix(num, suffix); ok {
			num, mult = strings.TrimSpace(rest), int64(1)<<(10*(i+1))
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return fmt.Errorf("%q is not a size: use bytes, or a number with KiB, MiB or GiB, such as 1MiB", s)
	}
	*b = byteSize(n * mult)
	return nil
}

// newProxy returns the reverse proxy to upstream. Its transport keeps many idle
// connections per host (the default keeps 2, so 8 concurrent clients would open and
// close a connection per request) and ignores $HTTP_PROXY: the upstream is addressed
// directly. Wrap the middleware in catchUnreached, and the proxy in bounded: see
// upstreamUnreached and upstreamTimedOut.
//
// Userinfo in the upstream URL (http://user:password@host) is sent to the upstream
// as basic authentication on every request whose client sent no Authorization of
// its own: it is the gateway's identity for callers that carry none. A client's own
// Authorization is forwarded unchanged (and it is part of the client's key scope).
func newProxy(upstream *url.URL, timeout time.Duration, log *slog.Logger) *httputil.ReverseProxy {
	user := upstream.User
	target := *upstream
	target.User = nil
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&target)
			pr.SetXForwarded()
			if user != nil && pr.Out.Header.Get("Authorization") == "" {
				pw, _ := user.Password()
				pr.Out.SetBasicAuth(user.Username(), pw)
			}
		},
		Transport:  newUpstreamTransport(timeout),
		BufferPool: proxyBuffers{},
		ErrorLog:   slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			log.Warn("idem serve: the upstream did not answer", "method", r.Method, "path", r.URL.Path, "err", err)
			if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "dial" {
				panic(upstreamUnreached{})
			}
			if ne, ok := errors.AsType[net.Error](err); (ok && ne.Timeout()) || errors.Is(err, context.DeadlineExceeded) {
				panic(upstreamTimedOut{})
			}
			writeBadGateway(w)
		},
	}
}

// bounded runs h (the proxy) with a deadline of timeout: the middleware detaches a
// keyed request from its client, so without it a hung upstream would hold the
// request's goroutine, buffers and connections forever after the client left.
func bounded(h http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// upstreamTimedOut is panicked by the proxy when the upstream call ran past
// --upstream-timeout. Like upstreamUnreached, the middleware releases the key
// rather than store a 504 for the whole --retention (the upstream may still finish,
// or may not have started: a retry runs it again, which the upstream must tolerate
// as it would any retry of a request that timed out), and catchUnreached answers
// 504. A call cut after the upstream's headers arrived is aborted by the proxy
// (http.ErrAbortHandler): the key is released and the client's connection closed.
type upstreamTimedOut struct{}

// upstreamUnreached is panicked by the proxy when it could not connect to the
// upstream, so the request certainly did not run there. The middleware gives the key
// of a panicking handler back, and catchUnreached, outside the middleware, answers
// 502: a retry runs the request once the upstream is back, where a stored 502 would
// be replayed for the whole --retention. (A request that reached the upstream but got
// no answer may have run: its 502 is stored like any 5xx, as --store-5xx says.)
type upstreamUnreached struct{}

// catchUnreached answers 502 to a request whose upstream could not be reached, and
// 504 to one whose upstream call timed out.
func catchUnreached(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				switch v.(type) {
				case upstreamUnreached:
					writeBadGateway(w)
				case upstreamTimedOut:
					writeGatewayTimeout(w)
				default:
					panic(v)
				}
			}
		}()
		h.ServeHTTP(w, r)
	})
}

func writeBadGateway(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusBadGateway)
	_, _ = io.WriteString(w, `{"type":"about:blank","title":"Bad Gateway","status":502,`+
		`"detail":"idem serve: the upstream did not answer; the gateway's log has the reason"}`+"\n")
}

func writeGatewayTimeout(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusGatewayTimeout)
	_, _ = io.WriteString(w, `{"type":"urn:idem:problem:upstream-timeout","title":"Gateway Timeout","status":504,`+
		`"detail":"idem serve: the upstream did not answer within --upstream-timeout; the Idempotency-Key was released, not stored: a retry with the same key runs the request again"}`+"\n")
}

// proxyBuffers reuses the proxy's 32 KiB copy buffers, else allocated per response:
// garbage that makes the collector scan the memory store's records more often.
type proxyBuffers struct{}

var proxyBufferPool = sync.Pool{New: func() any { return new([32 << 10]byte) }}

func (proxyBuffers) Get() []byte  { return proxyBufferPool.Get().(*[32 << 10]byte)[:] }
func (proxyBuffers) Put(b []byte) { proxyBufferPool.Put((*[32 << 10]byte)(b)) }

// newUpstreamTransport is the transport of newProxy: every phase of a call is
// bounded (dial 10 s, TLS handshake 10 s, response headers timeout), beside the
// deadline of bounded over the whole call.
func newUpstreamTransport(timeout time.Duration) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = 10 * time.Second
	t.ResponseHeaderTimeout = timeout
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 256
	t.IdleConnTimeout = 90 * time.Second
	return t
}
