package idemhttp

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
	// RequireKey makes a missing Idempotency-Key a 400 instead of a pass-through.
	RequireKey bool
	// Scope returns the key scope of a request, so one tenant never receives another
	// tenant's stored response. Default: a hash of the Authorization header
	// ("auth:" + 32 hex digits), or "anonymous" without one. A tenant header is a
	// common choice. An error is answered with 400.
	Scope func(r *http.Request) (string, error)
	// FingerprintHeaders are request headers included in the fingerprint (with the
	// method, path, query and body): the same key with a different value is a 422.
	FingerprintHeaders []string
	// ReplayHeaders are the response headers stored and replayed. Default
	// Content-Type, Content-Language, Location, Cache-Control, ETag, Last-Modified.
	ReplayHeaders []string
	// MaxBodyBytes bounds the request and response bodies the middleware stores.
	// Default 1 MiB. Beyond it, Oversize decides.
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
	// Registerer receives idem_http_requests_total{outcome} and
	// idem_http_request_duration_seconds; the store has its own metrics.
	Registerer prometheus.Registerer
	// Logger receives store failures. Default slog.Default().
	Logger *slog.Logger
}

// DefaultMaxBodyBytes is Config.MaxBodyBytes when zero.
const DefaultMaxBodyBytes = 1 << 20

var defaultReplayHeaders = []string{"Content-Type", "Content-Language", "Location", "Cache-Control", "ETag", "Last-Modified"}

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
	if cfg.Scope == nil {
		cfg.Scope = AuthorizationScope
	}
	if cfg.ReplayHeaders == nil {
		cfg.ReplayHeaders = defaultReplayHeaders
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
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch {
	case cfg.MaxBodyBytes < 0:
		return cfg, &idem.InputError{Field: "Config.MaxBodyBytes", Reason: "is negative", Fix: "leave it 0 for 1 MiB"}
	case cfg.Wait < 0 || cfg.Lease < 0 || cfg.Retention < 0:
		return cfg, &idem.InputError{Field: "Config", Reason: "has a negative Wait, Lease or Retention", Fix: "leave them 0 for the defaults"}
	case cfg.Oversize != Reject413 && cfg.Oversize != PassThrough:
		return cfg, &idem.InputError{Field: "Config.Oversize", Reason: fmt.Sprintf("is %d", cfg.Oversize), Fix: "use Reject413 or PassThrough"}
	}
	return cfg, nil
}

// AuthorizationScope is the default Config.Scope: the credentials' hash, so two
// callers with different credentials never share a key space, and no credential is
// stored in clear.
func AuthorizationScope(r *http.Request) (string, error) {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return "anonymous", nil
	}
	sum := sha256.Sum256([]byte(auth))
	return "auth:" + hex.EncodeToString(sum[:16]), nil
}

// HeaderScope returns a Config.Scope that scopes keys by the value of a tenant
// header; a request without it is answered 400.
func HeaderScope(header string) func(*http.Request) (string, error) {
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(header)
		if v == "" {
			return "", &idem.InputError{Field: header, Reason: "is missing", Fix: "send the " + header + " header with every request"}
		}
		return "tenant:" + v, nil
	}
}
