package admin

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/idemhq/idem"
	"github.com/prometheus/client_golang/prometheus"
)

// Config configures the admin API. Every area is optional: one left nil answers
// 404 ProblemNotConfigured, and GET /api/ lists the areas that are configured.
type Config struct {
	// Token grants full access: reads and mutations. It is sent as
	// "Authorization: Bearer <token>" and must be at least 16 bytes.
	Token string
	// ReadToken grants GET requests only; a mutation with it is answered 403. It
	// must be at least 16 bytes and differ from Token.
	ReadToken string
	// Insecure allows a Config with neither token: every request then has full
	// access. Even so, requests whose Host is not a loopback name are refused (a
	// defence against DNS rebinding), and CheckListen refuses a non-loopback
	// address.
	Insecure bool

	// Stores are the idempotency stores to inspect, by name (GET /api/stores).
	Stores map[string]idem.Inspector
	// DeadLetters is the inbox's dead-letter area.
	DeadLetters DeadLetters
	// Outbox is the outbox and relay area.
	Outbox Outbox
	// Effects lists stuck and failed effects.
	Effects Effects
	// Sagas lists saga instances and acts on them.
	Sagas Sagas
	// Stream shows the stream server's channels and clients.
	Stream Stream
	// Audit runs the end-to-end audit of the outbox's flow (AuditFrom): GET
	// /api/audit reads, POST /api/audit/repair republishes what is missing.
	// Each call runs a whole audit within Timeout: give the admin API a Timeout
	// above the audit's run time (idem_audit_run_duration_seconds).
	Audit Audit
	// Queue is the area of the database as the queue (QueueFrom): its messages
	// per topic and state, listed, and cancelled on demand.
	Queue Queue
	// Gatherer is read by GET /api/metrics, which sums its idem_* metrics over
	// their labels (the console's charts); usually the registry given to idem's
	// components as their Registerer.
	Gatherer prometheus.Gatherer
	// Metrics, if set, adds the metrics of other processes to GET /api/metrics:
	// their /metrics endpoints, read at most once per Metrics.Every. A daemon that
	// operates others (idem admin) sets it so that the console's charts show their
	// figures, and which source is down.
	Metrics *MetricsSources

	// Console, if set, is mounted at "/" (the operator's web console,
	// console.Handler() of package admin/console); the API keeps "/api/".
	Console http.Handler

	// Logger receives one audit record per mutating call (who, what, why, outcome;
	// those of calls refused without a valid token are rationed) and the internal
	// errors answered 500. Nil means slog.Default().
	Logger *slog.Logger
	// Registerer receives idem_admin_requests_total{route,code} and
	// idem_admin_refused_total{reason}. Nil records nothing.
	Registerer prometheus.Registerer
	// Timeout bounds each call into an area (0: 10 seconds). A call that runs out
	// is answered 504.
	Timeout time.Duration
	// Now is the clock that rations the audit records of refused calls
	// (RefusedLogEvery). Nil means time.Now.
	Now func() time.Time
}

// MinTokenLen is the shortest Token or ReadToken New accepts.
const MinTokenLen = 16

const defaultTimeout = 10 * time.Second

func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Token == "" && c.ReadToken == "" && !c.Insecure:
		return c, &idem.InputError{Field: "Config.Token", Reason: "is empty (and so is Config.ReadToken)",
			Fix: "set a random token of at least 16 bytes, or set Config.Insecure for a loopback-only development setup"}
	case c.Token != "" && len(c.Token) < MinTokenLen:
		return c, &idem.InputError{Field: "Config.Token", Reason: fmt.Sprintf("is shorter than %d bytes", MinTokenLen),
			Fix: "use a random token, e.g. 32 bytes from crypto/rand in hex"}
	case c.ReadToken != "" && len(c.ReadToken) < MinTokenLen:
		return c, &idem.InputError{Field: "Config.ReadToken", Reason: fmt.Sprintf("is shorter than %d bytes", MinTokenLen),
			Fix: "use a random token, e.g. 32 bytes from crypto/rand in hex"}
	case c.Token != "" && c.Token == c.ReadToken:
		return c, &idem.InputError{Field: "Config.ReadToken", Reason: "equals Config.Token",
			Fix: "use a different token for read-only access"}
	case c.Timeout < 0:
		return c, &idem.InputError{Field: "Config.Timeout", Reason: "is negative", Fix: "use a positive duration, or 0 for 10s"}
	}
	for name, s := range c.Stores {
		if err := checkName("Config.Stores", name); err != nil {
			return c, err
		}
		if s == nil {
			return c, &idem.InputError{Field: "Config.Stores", Reason: fmt.Sprintf("has a nil store %q", name),
				Fix: "remove the entry or set its Inspector"}
		}
	}
	if c.Metrics != nil {
		if err := c.Metrics.check(); err != nil {
			return c, err
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Timeout == 0 {
		c.Timeout = defaultTimeout
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

func checkName(field, name string) error {
	if name == "" || len(name) > 255 || strings.ContainsFunc(name, func(r rune) bool { return r < 0x21 || r == 0x7f }) {
		return &idem.InputError{Field: field, Reason: fmt.Sprintf("has a bad name %q", name),
			Fix: "use 1 to 255 printable characters without spaces"}
	}
	return nil
}

// CheckListen reports whether a daemon may serve the admin API of cfg on addr
// (host:port, as given to net.Listen): without a token it may listen on a loopback
// address only ("localhost", 127.0.0.0/8, ::1), never on all interfaces (":8080").
// The error is an *idem.InputError on field "listen".
func CheckListen(addr string, cfg Config) error {
	if cfg.Token != "" || cfg.ReadToken != "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return &idem.InputError{Field: "listen", Reason: fmt.Sprintf("is not host:port (%q)", addr),
			Fix: "use e.g. 127.0.0.1:8080"}
	}
	if !isLoopbackHost(host) {
		return &idem.InputError{Field: "listen", Reason: fmt.Sprintf("is %q, not a loopback address, and the admin API has no token", addr),
			Fix: "set an admin token, or listen on 127.0.0.1 or [::1]"}
	}
	return nil
}

// isLoopbackHost reports whether host (without port) names this machine only.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	return ip != nil && ip.IsLoopback()
}
