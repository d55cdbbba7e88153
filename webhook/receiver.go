package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemsql"
)

// DefaultRetention is Config.Retention when zero: seven days, beyond every
// supported sender's retry horizon (Stripe's three days).
const DefaultRetention = 7 * 24 * time.Hour

// DefaultScope is Config.Scope when empty.
const DefaultScope = "webhook"

// ProblemVerification is the RFC 9457 problem type of a delivery refused because
// its signature did not verify (400).
const ProblemVerification = "urn:idem:problem:webhook-verification"

// Config configures a Receiver. Verifier and (for Receiver) Store are required.
type Config struct {
	// Verifier checks each delivery and names its event: Standard, Stripe, GitHub.
	Verifier Verifier
	// Store records event ids and the handler's responses (idemmem, idemsqlite,
	// idempg, idemmysql, idemredis). AtomicReceiver ignores it.
	Store idem.Store
	// Scope keeps one endpoint's event ids apart from another's in a shared store:
	// name the endpoint ("stripe", "billing-webhooks"). Default DefaultScope.
	Scope string
	// Retention is how long a handled event is remembered, and so how late a retry
	// can come and still be recognized. Default DefaultRetention. It must cover the
	// sender's retry horizon (the verifier's RetryHorizon(): Stripe 3 days, Standard
	// Webhooks 28 hours, GitHub 3 days); a shorter one is refused unless
	// ShortRetention is set.
	Retention time.Duration
	// ShortRetention accepts a Retention shorter than the sender's retry horizon: an
	// event retried after it is forgotten runs again. Only for handlers that are
	// idempotent on their own.
	ShortRetention bool
	// MaxBodyBytes bounds a delivery's body and the stored response. Default
	// idemhttp.DefaultMaxBodyBytes (1 MiB); a larger delivery is answered 413.
	MaxBodyBytes int64
	// Wait, if positive, makes a delivery whose event is still being handled wait
	// up to this long for the first one and replay its answer, instead of 409 with
	// Retry-After at once. Keep it under the sender's timeout (Stripe and Svix wait
	// about 15 seconds).
	Wait time.Duration
	// Lease is the claim's lease, renewed while the handler runs. Default
	// idem.DefaultLease.
	Lease time.Duration
	// MaxInFlight caps the verified deliveries run at once; beyond it 503 with
	// Retry-After. Default idemhttp.DefaultMaxInFlight; negative for no cap.
	MaxInFlight int
	// Now is the clock that judges timestamps. Default time.Now.
	Now func() time.Time
	// Logger receives store failures. Default slog.Default().
	Logger *slog.Logger
	// Registerer receives idemhttp's request metrics (idem_http_requests_total).
	Registerer prometheus.Registerer
}

// horizoner is implemented by verifiers that know their sender's retry horizon.
type horizoner interface{ RetryHorizon() time.Duration }

func (cfg Config) withDefaults() (Config, error) {
	if cfg.Verifier == nil {
		return cfg, &idem.InputError{Field: "webhook.Config.Verifier", Reason: "is nil",
			Fix: "set it to webhook.Standard(secret), webhook.Stripe(secret) or webhook.GitHub(secret)"}
	}
	if cfg.Scope == "" {
		cfg.Scope = DefaultScope
	}
	if cfg.Retention < 0 {
		return cfg, &idem.InputError{Field: "webhook.Config.Retention", Reason: fmt.Sprintf("is negative (%s)", cfg.Retention),
			Fix: "leave it zero for the default " + DefaultRetention.String()}
	}
	if cfg.Retention == 0 {
		cfg.Retention = DefaultRetention
	}
	if h, ok := cfg.Verifier.(horizoner); ok && cfg.Retention < h.RetryHorizon() && !cfg.ShortRetention {
		return cfg, &idem.InputError{Field: "webhook.Config.Retention",
			Reason: fmt.Sprintf("(%s) is shorter than the sender's retry horizon (%s): a retry after it would run the handler again", cfg.Retention, h.RetryHorizon()),
			Fix:    "leave it zero for the default " + DefaultRetention.String() + ", or set ShortRetention if the handler is idempotent on its own"}
	}
	if cfg.MaxBodyBytes < 0 {
		return cfg, &idem.InputError{Field: "webhook.Config.MaxBodyBytes", Reason: fmt.Sprintf("is negative (%d)", cfg.MaxBodyBytes),
			Fix: "leave it zero for the default 1 MiB"}
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = idemhttp.DefaultMaxBodyBytes
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return cfg, nil
}

func (cfg Config) httpConfig() idemhttp.Config {
	noStore := false
	return idemhttp.Config{
		Store:      cfg.Store,
		Methods:    []string{http.MethodPost},
		RequireKey: true,
		Scope:      func(*http.Request) (string, error) { return cfg.Scope, nil },
		// A failed handler gives the event back, so the sender's retry runs it.
		StoreServerErrors: &noStore,
		MaxBodyBytes:      cfg.MaxBodyBytes,
		Wait:              cfg.Wait,
		Lease:             cfg.Lease,
		Retention:         cfg.Retention,
		// Event ids are the sender's, not time-embedded keys of ours; the
		// timestamp tolerance and Retention bound their age.
		MaxKeyAge:   -1,
		MaxInFlight: cfg.MaxInFlight,
		Now:         cfg.Now,
		Logger:      cfg.Logger,
		Registerer:  cfg.Registerer,
	}
}

// Receiver returns middleware that verifies each POSTed delivery and runs next
// once per event id, claimed and completed in cfg.Store around it. next gets the
// event id from EventID and the verified body in r.Body; its response is stored
// and replayed to the sender's retries. A 5xx or 429 from next gives the event
// back for the next retry. Other methods are answered 405.
func Receiver(cfg Config) (func(http.Handler) http.Handler, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	mw, err := idemhttp.Middleware(cfg.httpConfig())
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler { return verified(cfg, mw(next)) }, nil
}

// AtomicReceiver is Receiver for handlers whose effects live in store's SQL
// database: the event id is recorded in the same transaction as the handler's
// writes (the handler gets it from idemhttp.TxFrom), committed only if the
// handler answers below 500 (and not 429). A concurrent duplicate waits for that
// transaction and then replays its answer. cfg.Store is ignored.
func AtomicReceiver[Tx any](db idemsql.TxDB[Tx], store idem.TxStore[Tx], cfg Config) (func(http.Handler) http.Handler, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	mw, err := idemhttp.AtomicMiddleware(db, store, cfg.httpConfig())
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler { return verified(cfg, mw(next)) }, nil
}

type eventIDKey struct{}

// EventID returns the verified event id of the delivery being handled, or "".
func EventID(ctx context.Context) string {
	id, _ := ctx.Value(eventIDKey{}).(string)
	return id
}

// verified reads and verifies the delivery, then hands it to inner keyed by its
// event id. Nothing reaches a store before the signature verified.
func verified(cfg Config, inner http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			problem(w, http.StatusMethodNotAllowed, "about:blank", "Method Not Allowed", "webhook: deliveries are POSTed")
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, cfg.MaxBodyBytes))
		if err != nil {
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				problem(w, http.StatusRequestEntityTooLarge, idemhttp.ProblemBodyTooLarge, "Delivery too large",
					fmt.Sprintf("webhook: the body is larger than %d bytes, the most this endpoint accepts (Config.MaxBodyBytes)", cfg.MaxBodyBytes))
				return
			}
			problem(w, http.StatusBadRequest, "about:blank", "Bad Request", "webhook: the body could not be read: "+err.Error())
			return
		}
		id, err := cfg.Verifier.Verify(r.Header, body, cfg.Now())
		if err != nil {
			problem(w, http.StatusBadRequest, ProblemVerification, "Webhook verification failed", err.Error())
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), eventIDKey{}, id))
		r.Header = r.Header.Clone()
		// The event id is the key; whatever the sender put in idem's own headers
		// is not ours to honour.
		r.Header[idemhttp.HeaderKey] = []string{id}
		delete(r.Header, idem.HeaderDeadline)
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		inner.ServeHTTP(w, r)
	})
}

func problem(w http.ResponseWriter, status int, typ, title, detail string) {
	w.Header().Set("Content-Type", idemhttp.ContentTypeProblem)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{typ, title, status, detail})
}
