package idemhttp

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
)

// HeaderKey is the request header that carries the idempotency key (IETF httpapi
// draft "The Idempotency-Key HTTP Header Field"), and HeaderReplayed the response
// header set on a replayed response.
const (
	HeaderKey      = "Idempotency-Key"
	HeaderReplayed = "Idempotent-Replayed"
)

// Oversize says what the middleware does with a request or response body larger than
// Config.MaxBodyBytes, which it cannot store for replay.
type Oversize int

const (
	// Reject413 refuses the request with 413 and a problem+json body (the default):
	// a replay must never be truncated, so a request whose result cannot be stored is
	// not run under a key.
	Reject413 Oversize = iota
	// PassThrough runs the request without idempotency (no key is claimed, nothing is
	// stored), as if it had no key.
	PassThrough
)

// Config configures the server middleware. Store (or, for the atomic middleware, its
// TxStore) is the only required piece.
type Config struct {
	// Store records keys and responses (idemmem, idemsqlite, idempg, idemredis).
	// AtomicMiddleware ignores it: it uses the TxStore it is given.
	Store idem.Store
	// Methods the middleware applies to. Default POST and PATCH; GET, HEAD, OPTIONS,
	// PUT and DELETE are idempotent by HTTP semantics and pass through untouched.
	Methods []string
	// RequireKey makes a missing Idempotency-Key (or key from KeyHeader or
	// KeyJSONField) a 400 instead of a pass-through.
	RequireKey bool
	// KeyHeader, if set, names the request header that carries the key instead of
	// Idempotency-Key: "Webhook-Id" for Standard Webhooks senders (Svix, idem's own
	// WebhookSink), say. Headers that differ between the attempts of one request
	// (Webhook-Timestamp, Webhook-Signature, Stripe-Signature, Date) or that are no
	// key (Authorization, Cookie, Content-Type …) are refused. At most one of
	// KeyHeader and KeyJSONField.
	KeyHeader string
	// KeyJSONField, if set, names the top-level field of a JSON object body that
	// carries the key, a string or a number: "id" for Stripe's events (evt_…), say.
	// The body is read (within MaxBodyBytes, as for any keyed request) before the
	// key is known, then handed to the handler unchanged; a body that is not one
	// JSON object, a value of another type, or the field twice (in any letter case:
	// JSON decoders differ on which one wins) is answered 400. A body without the
	// field is a missing key (RequireKey). A body over MaxBodyBytes has no key:
	// Oversize decides. Every request of Methods counts toward MaxInFlight while
	// its body is read, since any may carry a key.
	//
	// The trap: the field must name the request, not something requests share. A
	// field that repeats across distinct requests ("type", "status", an order
	// number the client sends again with changes) makes the second request a
	// duplicate of the first: answered 422 when its body differs (the fingerprint
	// always covers the body), or, when the bodies happen to be equal, handed the
	// first one's response without running. So names that are seldom unique
	// ("type", "event", "object", "status", "order_id" …, commonKeyFields) are
	// refused unless AllowCommonKeyField.
	KeyJSONField string
	// AllowCommonKeyField accepts a KeyJSONField whose name is seldom unique, for an
	// API whose "event" (say) does hold a unique id.
	AllowCommonKeyField bool
	// Scope returns the key scope of a request, so one caller never receives another
	// caller's stored response. Default: CredentialScope over CredentialHeaders, a
	// hash of every credential the request carries. HeaderScope adds a tenant header
	// to it; TrustedHeaderScope uses the header alone (only behind a proxy that sets
	// it). An error is answered with 400.
	Scope func(r *http.Request) (string, error)
	// CredentialHeaders are the request headers, beside Authorization,
	// Proxy-Authorization and Cookie (always included), that carry a caller's
	// credentials and so separate the default scope of one caller from another's.
	// Default DefaultCredentialHeaders (X-Api-Key); an empty non-nil slice adds none.
	// Ignored when Scope is set.
	CredentialHeaders []string
	// CredentialCookies, if set, are the only cookies that identify a caller: the
	// default scope hashes their values instead of the whole Cookie header, so a
	// browser whose other cookies (analytics, preferences) changed between attempts
	// still retries in its own scope. Name the session cookie(s), such as "sid".
	// A named cookie counts whatever its value, even one Go's cookie parser
	// refuses (CookieCredentialScope): a request that carries one is never
	// "anonymous". Ignored when Scope is set.
	CredentialCookies []string
	// FingerprintHeaders are request headers included in the fingerprint (with the
	// method, path, query and body): the same key with a different value is a 422.
	FingerprintHeaders []string
	// ReplayHeaders, when set, is the allow-list of response headers stored and
	// replayed (hop-by-hop headers, Content-Length and Idempotent-Replayed never are).
	// Default nil: every response header is stored and replayed except hop-by-hop
	// ones (RFC 9110 §7.6.1, and those named by Connection), Content-Length
	// (recomputed), Date, Alt-Svc, Proxy-Authenticate, Set-Cookie (a cookie minted for
	// the first attempt is not handed out again) and Strict-Transport-Security.
	// Headers an outer middleware set before the handler ran, and the handler left
	// alone, belong to each attempt and are not stored either. Stored headers are
	// bounded by MaxStoredHeaderBytes.
	ReplayHeaders []string
	// MaxBodyBytes bounds the request and response bodies the middleware stores.
	// Default 1 MiB. A request body beyond it: Oversize decides. A response body
	// beyond it (or headers beyond MaxStoredHeaderBytes) is sent to the client as
	// it is written, and the key keeps a marker instead of the response: a retry gets
	// 500 ProblemResponseTooLarge and the handler does not run again. (In atomic mode
	// the transaction is rolled back instead; see AtomicMiddleware.)
	MaxBodyBytes int64
	Oversize     Oversize
	// StoreServerErrors keeps 5xx responses for replay, as Stripe does (the default,
	// true when nil): the client sees the same failure on retry. False releases the
	// key on a 5xx, so a retry runs the handler again. In atomic mode a stored 5xx
	// also commits the handler's transaction; false rolls it back.
	StoreServerErrors *bool
	// Wait, if positive, makes a request that finds its key in progress wait up to this
	// long for the first one to finish and then replay its response; otherwise (and
	// when the wait runs out) it is answered 409 with Retry-After.
	Wait time.Duration
	// Lease is how long a key stays claimed after its holder was last heard of.
	// While the handler runs, the middleware renews the lease every Lease/3 when the
	// store implements idem.Renewer (every store of this module does), so a live
	// handler keeps its key however long it takes, and a retry meanwhile gets 409 (or
	// waits); the lease only frees the key of a holder that died. With a store that
	// cannot renew, Lease bounds how long a handler may run before a retry can take
	// its key over. Default idem.DefaultLease (30 s). AtomicMiddleware needs no
	// renewal: its claim is held by the open transaction (a row lock in Postgres, the
	// write lock in SQLite), which a concurrent claim waits for whatever the lease.
	Lease time.Duration
	// Retention is how long a response is replayed. Default idem.DefaultRetention (24 h).
	Retention time.Duration
	// MaxKeyAge is the oldest a time-embedded key (UUIDv7, ULID: idemkey.Time) may
	// be: an older one is refused with 410 ProblemKeyExpired before it is claimed,
	// since its record may already be forgotten and running it could repeat its
	// effect. A key dated more than idemkey.MaxSkew ahead of Now is refused with 400
	// ProblemKeyFromFuture. Default Retention; negative turns both checks off. While
	// they are on, a record is kept for max(Retention, MaxKeyAge+idemkey.MaxSkew),
	// so no key the check lets through can outlive its record. Keys without a time
	// (UUIDv4, intent hashes, free text) cannot be judged and pass, unless
	// RequireTimedKeys.
	MaxKeyAge time.Duration
	// RequireTimedKeys refuses a key that carries no time (400 ProblemUntimedKey):
	// for APIs whose callers all send UUIDv7 or ULID keys (idemhttp.Transport does),
	// so no retry can slip past MaxKeyAge. It needs the check: with a negative
	// MaxKeyAge it is a configuration error.
	RequireTimedKeys bool
	// Now is the clock that judges key ages and Idem-Deadline (idem.HeaderDeadline).
	// Nil means time.Now. Set it to the store's clock when that one is not the wall
	// clock (tests, idem verify).
	Now func() time.Time
	// MaxInFlight caps the keyed requests being read or run at once (waiting ones
	// included): beyond it a keyed request is answered 503 with Retry-After at once,
	// before its body is read, so memory stays bounded (each one holds up to
	// MaxBodyBytes of request and of response; see the package documentation for
	// the figure). Default DefaultMaxInFlight; negative for no cap. Requests without
	// a key, or with a method outside Methods, are not counted.
	MaxInFlight int
	// Registerer receives idem_http_requests_total{outcome} and
	// idem_http_request_duration_seconds; the store has its own metrics.
	Registerer prometheus.Registerer
	// Logger receives store failures. Default slog.Default().
	Logger *slog.Logger
	// TracerProvider makes the span of each keyed request (idem.http.request; see
	// the package documentation); nil means the global one (otel.GetTracerProvider).
	// Propagator reads the caller's trace context (traceparent) from the request
	// headers when no span is active in its context yet; nil means the global one
	// (otel.GetTextMapPropagator).
	TracerProvider trace.TracerProvider
	Propagator     propagation.TextMapPropagator
}

// DefaultMaxBodyBytes is Config.MaxBodyBytes when zero.
const DefaultMaxBodyBytes = 1 << 20

// DefaultMaxInFlight is Config.MaxInFlight when zero: enough for a busy API behind
// one gateway (at 50 ms per request, 5,000 keyed requests a second), while the
// bodies it may hold stay within 256 × 3 MiB = 768 MiB at the default MaxBodyBytes,
// and in practice far less (bodies are rarely near the limit).
const DefaultMaxInFlight = 256

// withDefaults returns cfg with zero fields set to their defaults, validated: the one
// place defaults are applied. needStore is false for the atomic middleware, which
// takes its TxStore separately.
func (cfg Config) withDefaults(needStore bool) (Config, error) {
	if needStore && cfg.Store == nil {
		return cfg, &idem.InputError{Field: "Config.Store", Reason: "is nil",
			Fix: "pass a store: idemsqlite.Open, idempg.New, idemredis.New or idemmem.New"}
	}
	if cfg.Methods == nil {
		cfg.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	for _, m := range cfg.Methods {
		if slices.Contains([]string{http.MethodGet, http.MethodHead, http.MethodOptions}, m) {
			return cfg, &idem.InputError{Field: "Config.Methods", Reason: fmt.Sprintf("contains %s, which is safe and must not be cached as a result", m),
				Fix: "list only methods with effects, such as POST and PATCH"}
		}
	}
	if cfg.CredentialHeaders == nil {
		cfg.CredentialHeaders = DefaultCredentialHeaders
	}
	if cfg.Scope == nil {
		cfg.Scope = CookieCredentialScope(cfg.CredentialCookies, cfg.CredentialHeaders...)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.StoreServerErrors == nil {
		yes := true
		cfg.StoreServerErrors = &yes
	}
	if cfg.Lease == 0 {
		cfg.Lease = idem.DefaultLease
	}
	if cfg.Retention == 0 {
		cfg.Retention = idem.DefaultRetention
	}
	if cfg.MaxKeyAge == 0 {
		cfg.MaxKeyAge = cfg.Retention
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	switch {
	case cfg.MaxBodyBytes < 0:
		return cfg, &idem.InputError{Field: "Config.MaxBodyBytes", Reason: "is negative", Fix: "leave it 0 for 1 MiB"}
	case cfg.Wait < 0 || cfg.Lease < 0 || cfg.Retention < 0:
		return cfg, &idem.InputError{Field: "Config", Reason: "has a negative Wait, Lease or Retention", Fix: "leave them 0 for the defaults"}
	case cfg.RequireTimedKeys && cfg.MaxKeyAge < 0:
		return cfg, &idem.InputError{Field: "Config.RequireTimedKeys", Reason: "is set while a negative MaxKeyAge turns key ages off",
			Fix: "leave MaxKeyAge 0 (the Retention) or positive, or drop RequireTimedKeys"}
	case cfg.KeyHeader != "" && cfg.KeyJSONField != "":
		return cfg, &idem.InputError{Field: "Config.KeyHeader", Reason: "is set with Config.KeyJSONField",
			Fix: "take the key from one place: the header or the body's field"}
	case cfg.KeyHeader != "" && !isToken(cfg.KeyHeader):
		return cfg, &idem.InputError{Field: "Config.KeyHeader", Reason: fmt.Sprintf("is not an HTTP header name (got %q)", cfg.KeyHeader),
			Fix: "name the header that carries the key, such as Webhook-Id"}
	case cfg.KeyHeader != "" && slices.Contains(notKeyHeaders, http.CanonicalHeaderKey(cfg.KeyHeader)):
		return cfg, &idem.InputError{Field: "Config.KeyHeader", Reason: fmt.Sprintf("is %s, which changes between the attempts of one request or names no request", cfg.KeyHeader),
			Fix: "name the header that holds the request's own id, the same on every retry, such as Webhook-Id"}
	case cfg.KeyJSONField != "" && strings.TrimSpace(cfg.KeyJSONField) != cfg.KeyJSONField:
		return cfg, &idem.InputError{Field: "Config.KeyJSONField", Reason: fmt.Sprintf("starts or ends with a space (got %q)", cfg.KeyJSONField),
			Fix: "name the top-level field exactly, such as id"}
	case cfg.KeyJSONField != "" && !cfg.AllowCommonKeyField && commonKeyField(cfg.KeyJSONField):
		return cfg, &idem.InputError{Field: "Config.KeyJSONField", Reason: fmt.Sprintf("is %q, a field that distinct requests commonly share: a second request with the same value would be refused (422) or, with an equal body, answered with the first one's response without running", cfg.KeyJSONField),
			Fix: "name the field that holds each request's (event's) unique id, such as id; set AllowCommonKeyField if this one is unique in your API"}
	case cfg.Oversize != Reject413 && cfg.Oversize != PassThrough:
		return cfg, &idem.InputError{Field: "Config.Oversize", Reason: fmt.Sprintf("is %d", cfg.Oversize), Fix: "use Reject413 or PassThrough"}
	}
	return cfg, nil
}

// notKeyHeaders are refused as Config.KeyHeader: they change between the attempts
// of one request (a retry would run again), or belong to something else.
var notKeyHeaders = []string{"Webhook-Timestamp", "Webhook-Signature", "Stripe-Signature", "Date",
	"Authorization", "Proxy-Authorization", "Cookie", "Content-Type", "Content-Length", "Host",
	"Traceparent", "Tracestate", "X-Request-Id", "X-Hub-Signature-256", "Idem-Timestamp", "Idem-Signature"}

// commonKeyFields are names of JSON fields that distinct requests commonly share:
// refused as Config.KeyJSONField unless AllowCommonKeyField. Matched without
// regard to letter case, "_" and "-".
var commonKeyFields = []string{"type", "event", "eventtype", "object", "status", "state", "action", "kind",
	"name", "topic", "version", "apiversion", "livemode", "created", "createdat", "timestamp", "time", "date",
	"amount", "currency", "data", "payload", "customer", "customerid", "user", "userid", "account",
	"accountid", "order", "orderid", "ordernumber", "email", "source", "resource", "method", "path"}

// commonKeyField reports whether name is one of commonKeyFields.
func commonKeyField(name string) bool {
	n := strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(name))
	return slices.Contains(commonKeyFields, n)
}

// DefaultCredentialHeaders is Config.CredentialHeaders when nil: the API-key header
// most APIs use beside Authorization and cookies.
var DefaultCredentialHeaders = []string{"X-Api-Key"}

// alwaysCredentials are part of every credential scope.
var alwaysCredentials = []string{"Authorization", "Proxy-Authorization", "Cookie"}

// CredentialScope returns a Config.Scope that hashes the credentials a request
// carries: the values of Authorization, Proxy-Authorization, Cookie and of headers
// (all of them, in this order, each name and value length-prefixed) under SHA-256.
// The scope is "cred:" and 32 hex digits of the hash, or "anonymous" for a request
// that carries none of them; a request whose only credential is one Authorization
// header gets AuthorizationScope's "auth:" scope, as before CredentialScope existed,
// so keys stored by earlier versions keep replaying. So two callers with different credentials never share
// a key space, whichever way they authenticate, and no credential is stored in
// clear.
//
// The scope changes whenever any of these values does: a retry must carry the same
// credentials (and the same cookies: a browser whose analytics cookie changed
// between attempts retries in another scope, where its key runs again). When only
// some cookies identify the caller, use CookieCredentialScope.
func CredentialScope(headers ...string) func(*http.Request) (string, error) {
	var names []string
	for _, n := range append(slices.Clone(alwaysCredentials), headers...) {
		if n = http.CanonicalHeaderKey(n); !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return func(r *http.Request) (string, error) {
		if auth := r.Header["Authorization"]; len(auth) == 1 && onlyCredential(r, names) {
			// The scope AuthorizationScope gave before this one: keys stored by an
			// earlier version keep replaying across an upgrade.
			return AuthorizationScope(r)
		}
		if s, ok := credentialHash(r, names); ok {
			return "cred:" + s, nil
		}
		return "anonymous", nil
	}
}

// TenantScope returns a Config.Scope for a tenant header combined with the scope
// creds gives the caller's credentials: "tenant:<value>/" followed by it. HeaderScope
// is TenantScope over CredentialScope; pass CookieCredentialScope to name the
// session cookies. A request without the header is answered 400.
func TenantScope(header string, creds func(*http.Request) (string, error)) func(*http.Request) (string, error) {
	header = http.CanonicalHeaderKey(header)
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(header)
		if v == "" {
			return "", missingHeader(header)
		}
		c, err := creds(r)
		if err != nil {
			return "", err
		}
		return "tenant:" + v + "/" + c, nil
	}
}

// onlyCredential reports whether Authorization is the only one of names (which
// start with it) that r carries.
func onlyCredential(r *http.Request, names []string) bool {
	for _, name := range names[1:] {
		if len(r.Header[name]) > 0 {
			return false
		}
	}
	return true
}

// credentialHash returns the hex hash of the values of names in r, and false when r
// carries none of them.
func credentialHash(r *http.Request, names []string) (string, bool) {
	var stack [256]byte
	b, found := stack[:0], false
	for _, name := range names {
		vs := r.Header[name]
		found = found || len(vs) > 0
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendField(b, v)
		}
	}
	if !found {
		return "", false
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16]), true
}

// AuthorizationScope is a Config.Scope over the Authorization header alone: its
// hash ("auth:" + 32 hex digits), or "anonymous" without one. It was the default
// before CredentialScope; callers who authenticate with cookies or API keys are all
// "anonymous" under it and replay each other's responses, so use it only where
// Authorization is the one credential a request can carry.
func AuthorizationScope(r *http.Request) (string, error) {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return "anonymous", nil
	}
	sum := sha256.Sum256([]byte(auth))
	return "auth:" + hex.EncodeToString(sum[:16]), nil
}

// HeaderScope returns a Config.Scope for a tenant header combined with the
// caller's credentials: "tenant:<value>/" followed by CredentialScope's hash of
// Authorization, Proxy-Authorization, Cookie and credentialHeaders (pass
// DefaultCredentialHeaders for X-Api-Key), or "/anonymous". The header only
// partitions keys further: a caller who sends another tenant's header value
// without that tenant's credentials lands in a scope of its own and cannot receive
// the tenant's responses. A request without the header is answered 400.
func HeaderScope(header string, credentialHeaders ...string) func(*http.Request) (string, error) {
	return TenantScope(header, CredentialScope(credentialHeaders...))
}

// TrustedHeaderScope returns a Config.Scope that is the value of a tenant header
// alone ("tenant:" + value): every request that sends a tenant's value receives that
// tenant's stored responses. Use it only behind a trusted proxy that authenticates
// the caller and sets this header (and strips it from what callers send);
// otherwise anyone can read a tenant's responses by sending its header, key and
// body. A request without the header is answered 400.
func TrustedHeaderScope(header string) func(*http.Request) (string, error) {
	header = http.CanonicalHeaderKey(header)
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(header)
		if v == "" {
			return "", missingHeader(header)
		}
		return "tenant:" + v, nil
	}
}

func missingHeader(header string) error {
	return &idem.InputError{Field: header, Reason: "is missing", Fix: "send the " + header + " header with every request"}
}
