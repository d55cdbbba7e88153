package idemredis

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/idemhq/idem"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// DefaultPrefix is the key prefix used when Config.Prefix is empty.
const DefaultPrefix = "idem:"

// maxPrefixLen keeps keys (prefix + scope + id, each up to 255 bytes) short enough to
// hash and compare cheaply; a longer prefix is a configuration mistake.
const maxPrefixLen = 255

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// Prefix starts every Redis key the store writes, so one Redis can hold several
	// stores (or other data) side by side. Empty means DefaultPrefix ("idem:"). It must
	// not contain '{' or '}': a hash tag in the prefix would send every key to one
	// Redis Cluster slot.
	Prefix string
	// Registerer, if set, receives the store's Prometheus metrics
	// (idem_claims_total, idem_duplicates_total, idem_claim_duration_seconds).
	// Redis cannot count one prefix's keys cheaply, so idem_records is not exported.
	Registerer prometheus.Registerer
	// TracerProvider receives a span per Claim, ClaimBatch, Complete and Release
	// (see the package documentation). Nil means the global provider; while that
	// is unset, or with a no-op provider, no span is started.
	TracerProvider trace.TracerProvider
	// WaitReplicas, if above 0, makes every write a claim or a renewal depends on
	// (Claim, ClaimBatch, Complete, Renew) wait, with Redis's WAIT on the same
	// connection, until that many replicas of the key's master have it; a call
	// whose write fewer replicas acknowledged within WaitTimeout fails with a
	// retryable error wrapping ErrNotReplicated. With it, a Complete that returned
	// nil survives the failover of its master to a replica that acknowledged it
	// (see "Replication and failover" in the package doc). Zero, the default, does
	// not wait: Redis replicates asynchronously, and a failover can lose the last
	// writes it acknowledged.
	WaitReplicas int
	// WaitTimeout bounds each WAIT. Zero means DefaultWaitTimeout.
	WaitTimeout time.Duration
}

// DefaultWaitTimeout is Config.WaitTimeout's default.
const DefaultWaitTimeout = time.Second

// maxWaitReplicas bounds Config.WaitReplicas: more than a Redis master can usefully
// have is a typo.
const maxWaitReplicas = 64

// withDefaults returns cfg with zero fields replaced by their defaults, validated.
// It is the one place defaults are applied.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.WaitReplicas > 0 && cfg.WaitTimeout == 0 {
		cfg.WaitTimeout = DefaultWaitTimeout
	}
	return cfg, cfg.validate()
}

func (cfg Config) validate() error {
	switch {
	case cfg.WaitReplicas < 0 || cfg.WaitReplicas > maxWaitReplicas:
		return &idem.InputError{Field: "Config.WaitReplicas", Reason: fmt.Sprintf("is %d", cfg.WaitReplicas),
			Fix: fmt.Sprintf("use 0 (do not wait) or the number of replicas each master has, at most %d", maxWaitReplicas)}
	case cfg.WaitTimeout < 0 || cfg.WaitTimeout > time.Minute:
		return &idem.InputError{Field: "Config.WaitTimeout", Reason: fmt.Sprintf("is %v", cfg.WaitTimeout),
			Fix: "use a timeout between 1ms and 1m, e.g. 1s (0 means the default)"}
	case cfg.WaitTimeout > 0 && cfg.WaitTimeout < time.Millisecond:
		return &idem.InputError{Field: "Config.WaitTimeout", Reason: fmt.Sprintf("is %v", cfg.WaitTimeout),
			Fix: "use at least 1ms: WAIT counts whole milliseconds, and 0ms would wait forever"}
	}
	p := cfg.Prefix
	switch {
	case len(p) > maxPrefixLen:
		return &idem.InputError{Field: "Config.Prefix", Reason: fmt.Sprintf("is longer than %d bytes (got %d)", maxPrefixLen, len(p)),
			Fix: "use a short namespace such as \"idem:\" or \"orders-idem:\""}
	case strings.ContainsAny(p, "{}"):
		return &idem.InputError{Field: "Config.Prefix", Reason: fmt.Sprintf("contains a hash tag brace (%q)", p),
			Fix: "remove '{' and '}': a hash tag in the prefix puts every key in one Redis Cluster slot"}
	case !utf8.ValidString(p):
		return &idem.InputError{Field: "Config.Prefix", Reason: "is not valid UTF-8", Fix: "use printable text such as \"idem:\""}
	}
	for i, r := range p {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return &idem.InputError{Field: "Config.Prefix", Reason: fmt.Sprintf("has a control or space character %U at byte %d", r, i),
				Fix: "use printable characters without spaces, so keys stay readable in redis-cli"}
		}
	}
	return nil
}
