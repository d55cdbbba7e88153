package idemredis

import (
	"fmt"
	"strings"
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
}

// withDefaults returns cfg with zero fields replaced by their defaults, validated.
// It is the one place defaults are applied.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	return cfg, cfg.validate()
}

func (cfg Config) validate() error {
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
