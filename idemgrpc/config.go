package idemgrpc

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/idemhq/idem"
)

// MetadataKey is the metadata key that carries a call's idempotency key: the
// gRPC spelling of the IETF draft's Idempotency-Key header (gRPC metadata keys
// are lower case).
const MetadataKey = "idempotency-key"

// MetadataReplayed is set to "true" in the response headers of a replayed call:
// the handler did not run, the response is the one stored for its key.
const MetadataReplayed = "idempotent-replayed"

// DefaultMaxResponseBytes is Config.MaxResponseBytes when zero.
const DefaultMaxResponseBytes = 1 << 20

// DefaultMaxInFlight is Config.MaxInFlight when zero, as for the HTTP middleware.
const DefaultMaxInFlight = 256

// DefaultCredentialMetadata is Config.CredentialMetadata when nil: the metadata
// that carries a caller's credentials in most gRPC APIs (per-RPC credentials such
// as oauth.TokenSource send "authorization").
var DefaultCredentialMetadata = []string{"authorization", "x-api-key"}

// Config configures the server interceptor. Store (or, for the atomic interceptor,
// its TxStore) is the only required piece.
type Config struct {
	// Store records keys and responses (idemmem, idemsqlite, idempg, idemmysql,
	// idemredis). AtomicUnaryServerInterceptor ignores it: it uses its TxStore.
	Store idem.Store
	// Methods lists the full method names ("/pkg.Service/Method") the interceptor
	// applies to. Default nil: every unary method except those whose descriptor
	// declares option idempotency_level = NO_SIDE_EFFECTS (a read has no effect
	// to deduplicate). Other methods pass through untouched.
	Methods []string
	// RequireKey answers a call without a key InvalidArgument instead of running it
	// unguarded.
	RequireKey bool
	// RequestField, if set, names a top-level string field of the request message
	// that carries the key when the metadata does not: "request_id" (AIP-155) or
	// "idempotency_key" (AEP-155). A call with both must send the same key in both
	// (InvalidArgument otherwise). A request message without the field is an
	// InvalidArgument: configure Methods to the methods that have it.
	RequestField protoreflect.Name
	// Scope returns the key scope of a call, so one caller never receives another
	// caller's stored response. Default: CredentialScope over CredentialMetadata,
	// a hash of the verified TLS client certificate's identity and of every
	// credential the call carries, never a name the caller merely claims. An error
	// is answered InvalidArgument (an *idem.InputError) or Unauthenticated.
	Scope func(ctx context.Context) (string, error)
	// CredentialMetadata are the metadata keys that carry a caller's credentials.
	// Default DefaultCredentialMetadata. Ignored when Scope is set.
	CredentialMetadata []string
	// FingerprintMetadata are metadata keys included in the fingerprint (with the
	// full method name and the request message): the same key with another value
	// is a conflict.
	FingerprintMetadata []string
	// MaxResponseBytes bounds a stored result: the response message, its status
	// details, headers and trailers. Default DefaultMaxResponseBytes. A larger
	// result is sent to the caller and the key keeps a marker instead: a retry is
	// answered Internal (reason IDEMPOTENCY_RESPONSE_NOT_STORED) and the handler
	// does not run again. (The atomic interceptor rolls back instead.)
	MaxResponseBytes int
	// StoreServerErrors keeps the codes Internal, Unknown, DataLoss and
	// Unimplemented for replay (the default, true when nil), as Stripe keeps 5xx:
	// a retry sees the same failure. False releases the key, so a retry runs the
	// handler again. The transient codes (Unavailable, ResourceExhausted,
	// Aborted, Canceled, DeadlineExceeded) are never stored: they ask for a retry.
	StoreServerErrors *bool
	// Wait, if positive, makes a call that finds its key in progress wait up to this
	// long for the first one to finish and replay its result; otherwise (and when
	// the wait runs out) it is answered Unavailable with a retry pushback.
	Wait time.Duration
	// Lease is how long a key stays claimed after its holder was last heard of.
	// While the handler runs the lease is renewed every Lease/3 (stores that
	// implement idem.Renewer: all of this module's), so a slow handler keeps its
	// key. Default idem.DefaultLease. AtomicUnaryServerInterceptor does not use
	// it: its claim is held by the call's transaction, however long it runs.
	Lease time.Duration
	// Retention is how long a result is replayed. Default idem.DefaultRetention.
	Retention time.Duration
	// MaxKeyAge is the oldest a time-embedded key (UUIDv7, ULID) may be: an older
	// one is refused FailedPrecondition (reason IDEMPOTENCY_KEY_EXPIRED) before it
	// is claimed; one dated more than idemkey.MaxSkew ahead is refused
	// InvalidArgument. Default Retention; negative turns both checks off. As in
	// idemhttp, records are kept for max(Retention, MaxKeyAge+idemkey.MaxSkew).
	MaxKeyAge time.Duration
	// RequireTimedKeys refuses a key that carries no time (InvalidArgument).
	RequireTimedKeys bool
	// Now is the clock that judges key ages. Nil means time.Now.
	Now func() time.Time
	// MaxInFlight caps the keyed calls being run or waited on at once: beyond it
	// a keyed call is answered ResourceExhausted with a retry pushback. Default
	// DefaultMaxInFlight; negative for no cap.
	MaxInFlight int
	// Files and Types resolve a method's response type to replay a stored
	// response before this process has run that method. Default
	// protoregistry.GlobalFiles and GlobalTypes, where generated code registers.
	Files *protoregistry.Files
	Types *protoregistry.Types
	// Registerer receives idem_grpc_requests_total{outcome},
	// idem_grpc_request_duration_seconds and idem_grpc_refused_total{reason}.
	Registerer prometheus.Registerer
	// Logger receives store failures. Default slog.Default().
	Logger *slog.Logger
}

// withDefaults returns cfg with its defaults applied, validated.
func (cfg Config) withDefaults(needStore bool) (Config, error) {
	if needStore && cfg.Store == nil {
		return cfg, &idem.InputError{Field: "Config.Store", Reason: "is nil",
			Fix: "pass a store: idemsqlite.Open, idempg.New, idemmysql.Open, idemredis.New or idemmem.New"}
	}
	for _, m := range cfg.Methods {
		if !strings.HasPrefix(m, "/") || strings.Count(m, "/") != 2 {
			return cfg, &idem.InputError{Field: "Config.Methods", Reason: fmt.Sprintf("holds %q, which is not a full method name", m),
				Fix: `write methods as grpc.UnaryServerInfo.FullMethod spells them: "/package.Service/Method"`}
		}
	}
	if cfg.RequestField != "" && !cfg.RequestField.IsValid() {
		return cfg, &idem.InputError{Field: "Config.RequestField", Reason: fmt.Sprintf("is %q, not a protobuf field name", cfg.RequestField),
			Fix: "name the request message's top-level string field, such as request_id"}
	}
	if cfg.CredentialMetadata == nil {
		cfg.CredentialMetadata = DefaultCredentialMetadata
	}
	// Lowered into new slices: the caller's (or DefaultCredentialMetadata, shared by
	// every interceptor) must not be written to.
	cfg.CredentialMetadata = lowered(cfg.CredentialMetadata)
	cfg.FingerprintMetadata = lowered(cfg.FingerprintMetadata)
	if cfg.Scope == nil {
		cfg.Scope = CredentialScope(cfg.CredentialMetadata...)
	}
	if cfg.MaxResponseBytes == 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
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
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.Files == nil {
		cfg.Files = protoregistry.GlobalFiles
	}
	if cfg.Types == nil {
		cfg.Types = protoregistry.GlobalTypes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch {
	case cfg.MaxResponseBytes < 0:
		return cfg, &idem.InputError{Field: "Config.MaxResponseBytes", Reason: "is negative", Fix: "leave it 0 for 1 MiB"}
	case cfg.Wait < 0 || cfg.Lease < 0 || cfg.Retention < 0:
		return cfg, &idem.InputError{Field: "Config", Reason: "has a negative Wait, Lease or Retention", Fix: "leave them 0 for the defaults"}
	case cfg.RequireTimedKeys && cfg.MaxKeyAge < 0:
		return cfg, &idem.InputError{Field: "Config.RequireTimedKeys", Reason: "is set while a negative MaxKeyAge turns key ages off",
			Fix: "leave MaxKeyAge 0 (the Retention) or positive, or drop RequireTimedKeys"}
	}
	return cfg, nil
}

// lowered returns a copy of keys in lower case, as metadata keys arrive.
func lowered(keys []string) []string {
	if keys == nil {
		return nil
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = strings.ToLower(k)
	}
	return out
}
