package admin

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/idemhq/idem/admin/view"
	"github.com/idemhq/idem/internal/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// MaxBodyBytes bounds a request body; a larger one is answered 413.
const MaxBodyBytes = 64 << 10

// maxActorLen bounds the X-Idem-Actor header as logged.
const maxActorLen = 128

// Token kinds, as logged by the audit record.
const (
	accessNone = "none" // Insecure, no token configured: full access
	accessFull = "full"
	accessRead = "read"
)

type handler struct {
	cfg       Config
	fullSum   [sha256.Size]byte
	readSum   [sha256.Size]byte
	areas     map[string]bool
	requests  *prometheus.CounterVec
	refused   *refusals
	crossSite *http.CrossOriginProtection
	mux       *http.ServeMux
	openapi   []byte
	scraper   *scraper // Config.Metrics, if set
}

// call is one request in flight: who made it and, for a mutation, what the audit
// record says about it.
type call struct {
	access string
	target []any // slog key-value pairs naming what the call acts on
	reason string
}

// full reports whether the caller has full access.
func (c *call) full() bool { return c.access == accessFull || c.access == accessNone }

// New returns the admin API for cfg: JSON over HTTP under /api/ (the routes are in
// the OpenAPI document at /api/openapi.json), and cfg.Console at / if set.
// The error is an *idem.InputError naming a bad Config field, or the Registerer's.
func New(cfg Config) (http.Handler, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	h := &handler{cfg: cfg, crossSite: http.NewCrossOriginProtection(), mux: http.NewServeMux(), openapi: openAPI()}
	if cfg.Metrics != nil {
		h.scraper = newScraper(*cfg.Metrics)
	}
	h.fullSum, h.readSum = sha256.Sum256([]byte(cfg.Token)), sha256.Sum256([]byte(cfg.ReadToken))
	h.areas = map[string]bool{
		areaAPI:         true,
		areaKeys:        len(cfg.Stores) > 0,
		areaDeadLetters: cfg.DeadLetters != nil,
		areaOutbox:      cfg.Outbox != nil,
		areaEffects:     cfg.Effects != nil,
		areaSagas:       cfg.Sagas != nil,
		areaStream:      cfg.Stream != nil,
		areaAudit:       cfg.Audit != nil,
		areaQueue:       cfg.Queue != nil,
		areaMetrics:     cfg.Gatherer != nil || cfg.Metrics != nil,
	}
	if cfg.Registerer != nil {
		h.requests, err = metrics.Counters(cfg.Registerer, "idem_admin_requests_total",
			"Requests answered by the admin API, by route pattern and status code.",
			"route", "code")
		if err != nil {
			return nil, fmt.Errorf("admin: register metrics: %w", err)
		}
	}
	if h.refused, err = newRefusals(cfg.Registerer, cfg.Now); err != nil {
		return nil, fmt.Errorf("admin: register metrics: %w", err)
	}
	for _, rt := range routes {
		h.mux.Handle(rt.pattern(), h.wrap(rt))
	}
	h.mux.Handle("/api/", h.wrap(noRoute))
	if cfg.Console != nil {
		h.mux.Handle("/", cfg.Console)
	}
	return h.mux, nil
}

// wrap runs rt with the checks every route shares: authentication, the area being
// configured, and for a mutation the cross-site, media type and body checks; then
// answers, counts and, for a mutation, audits.
func (h *handler) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &call{}
		if rt.mutates {
			r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		}
		status, p := h.serve(w, r, rt, c)
		if h.requests != nil {
			h.requests.WithLabelValues(rt.label(), strconv.Itoa(status)).Inc()
		}
		if p != nil && p.refusal != "" {
			h.refused.count(p.refusal)
		}
		if rt.mutates {
			h.audit(r, rt, c, status, p)
		}
	})
}

func (h *handler) serve(w http.ResponseWriter, r *http.Request, rt route, c *call) (int, *problem) {
	v, err := h.run(r, rt, c)
	if err != nil {
		p, logIt := toProblem(err, rt.summary)
		if logIt {
			h.cfg.Logger.LogAttrs(r.Context(), slog.LevelError, "admin: request failed",
				slog.String("route", rt.label()), slog.String("error", err.Error()))
		}
		writeProblem(w, p)
		return p.Status, p
	}
	if raw, ok := v.(rawJSON); ok {
		writeBody(w, http.StatusOK, "application/json", raw)
		return http.StatusOK, nil
	}
	writeJSON(w, http.StatusOK, "application/json", v)
	return http.StatusOK, nil
}

// rawJSON is a response body already encoded.
type rawJSON []byte

func (h *handler) run(r *http.Request, rt route, c *call) (any, error) {
	if err := h.authenticate(r, c); err != nil {
		return nil, err
	}
	if rt.mutates {
		if !c.full() {
			return nil, refuse(http.StatusForbidden, ProblemForbidden, refusedReadOnly, "the read token cannot make changes: use the full-access token")
		}
		if err := h.crossSite.Check(r); err != nil {
			return nil, refuse(http.StatusForbidden, ProblemForbidden, refusedCrossSite,
				"cross-site request refused: send mutations from the console's own origin or from a non-browser client")
		}
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != "application/json" {
			return nil, newProblem(http.StatusUnsupportedMediaType, ProblemUnsupportedMediaType,
				"Content-Type must be application/json, with a JSON object body")
		}
	}
	if !h.areas[rt.area] {
		return nil, newProblem(http.StatusNotFound, ProblemNotConfigured,
			"the "+rt.area+" area is not configured on this server; GET /api/ lists the configured areas")
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	return rt.serve(h, r.WithContext(ctx), c)
}

// authenticate sets c.access from the Authorization header. Both tokens are
// compared, in constant time on their hashes, whichever matches.
func (h *handler) authenticate(r *http.Request, c *call) error {
	if h.cfg.Token == "" && h.cfg.ReadToken == "" {
		host := r.Host
		if hp, _, err := net.SplitHostPort(host); err == nil {
			host = hp
		}
		if !isLoopbackHost(host) {
			return refuse(http.StatusForbidden, ProblemForbidden, refusedNotLoopback,
				"without a token the admin API answers loopback hosts only: configure a token to serve "+strconv.Quote(view.Clean(r.Host, 64)))
		}
		c.access = accessNone
		return nil
	}
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return refuse(http.StatusUnauthorized, ProblemUnauthorized, refusedNoToken, "send Authorization: Bearer <token>")
	}
	sum := sha256.Sum256([]byte(tok))
	full := subtle.ConstantTimeCompare(sum[:], h.fullSum[:]) & boolInt(h.cfg.Token != "")
	read := subtle.ConstantTimeCompare(sum[:], h.readSum[:]) & boolInt(h.cfg.ReadToken != "")
	switch {
	case full == 1:
		c.access = accessFull
	case read == 1:
		c.access = accessRead
	default:
		return refuse(http.StatusUnauthorized, ProblemUnauthorized, refusedBadToken, "the bearer token is not one of this server's admin tokens")
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// audit logs the one record of a mutating call: who, what, why and the outcome.
// Tokens and payloads are never part of it. The records of calls refused before
// their route ran are rationed (refusals.record), and the X-Idem-Actor of a caller
// without a valid token is not recorded: anyone can send it.
func (h *handler) audit(r *http.Request, rt route, c *call, status int, p *problem) {
	who := []any{slog.String("access", cmp.Or(c.access, "unauthenticated")), slog.String("remote", r.RemoteAddr)}
	if c.access != "" {
		who = append(who, slog.String("actor", view.Clean(r.Header.Get("X-Idem-Actor"), maxActorLen)))
	}
	outcome, level := "ok", slog.LevelInfo
	if p != nil {
		outcome = p.Type
	}
	args := []any{
		slog.String("route", rt.label()),
		slog.Group("who", who...),
		slog.Group("what", c.target...),
		slog.String("why", c.reason),
		slog.String("outcome", outcome),
		slog.Int("status", status),
	}
	if p != nil && p.refusal != "" {
		ok, skipped := h.refused.record()
		if !ok {
			return
		}
		level = slog.LevelWarn
		args = append(args, slog.String("refused", p.refusal), slog.Int64("skipped", skipped))
	}
	h.cfg.Logger.Log(r.Context(), level, "admin: audit", args...)
}
