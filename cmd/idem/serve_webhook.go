package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/idemhq/idem/webhook"
)

// envWebhookSecret holds the secrets of --webhook, comma-separated during a
// rotation. Only the environment carries them: a flag would show in ps and in
// shell history.
const envWebhookSecret = "IDEM_WEBHOOK_SECRET"

// webhookSpec is the verification of --webhook: what check derived from the flag
// and $IDEM_WEBHOOK_SECRET.
type webhookSpec struct {
	kind     string
	verifier webhook.Verifier
	secrets  int
	// retention is --retention if given, else 0 for webhook.DefaultRetention.
	retention bool
}

// webhookIgnored are the flags of the Idempotency-Key gateway that --webhook
// decides itself: given together, they are refused rather than silently ignored.
var webhookIgnored = map[string]string{
	"methods":                "deliveries are POSTed",
	"require-key":            "every delivery is keyed by its event id",
	"store-5xx":              "an upstream 5xx or 429 always lets the sender's retry run again",
	"scope-header":           "keys are scoped by the endpoint, not the caller",
	"trust-scope-header":     "keys are scoped by the endpoint, not the caller",
	"credential-headers":     "keys are scoped by the endpoint, not the caller",
	"credential-cookies":     "keys are scoped by the endpoint, not the caller",
	"key-max-age":            "the delivery's signed timestamp and --retention bound its age",
	"require-timed-keys":     "event ids are the sender's",
	"oversize":               "a delivery over --max-body is refused (413)",
	"key-header":             "the key is the event id the signature covers",
	"key-json-field":         "the key is the event id the signature covers",
	"allow-common-key-field": "the key is the event id the signature covers",
}

// checkWebhook builds the verifier of --webhook from the secrets lookup finds, and
// refuses the flags it makes meaningless. No secret reaches an error message.
func checkWebhook(fs *flag.FlagSet, o *serveOptions, lookup func(string) (string, bool)) (*webhookSpec, error) {
	kind := o.webhook
	if kind == "" {
		return nil, nil
	}
	var err error
	fs.Visit(func(f *flag.Flag) {
		if why, ok := webhookIgnored[f.Name]; ok && err == nil {
			err = fmt.Errorf("--%s does not apply with --webhook: %s; leave it out", f.Name, why)
		}
	})
	if err != nil {
		return nil, err
	}
	raw, _ := lookup(envWebhookSecret)
	var secrets []string
	for s := range strings.SplitSeq(raw, ",") {
		if s = strings.TrimSpace(s); s != "" {
			secrets = append(secrets, s)
		}
	}
	if len(secrets) == 0 {
		return nil, fmt.Errorf("--webhook %s needs the signing secret in $%s (comma-separated during a rotation); it is read from the environment only", kind, envWebhookSecret)
	}
	spec := &webhookSpec{kind: kind, secrets: len(secrets)}
	switch kind {
	case "standard":
		spec.verifier, err = webhook.Standard(secrets...)
	case "stripe":
		spec.verifier, err = webhook.Stripe(secrets...)
	case "github":
		spec.verifier, err = webhook.GitHub(secrets...)
	default:
		return nil, fmt.Errorf("--webhook %q: use standard (Standard Webhooks, Svix), stripe or github", kind)
	}
	if err != nil {
		return nil, fmt.Errorf("$%s: %w", envWebhookSecret, err)
	}
	fs.Visit(func(f *flag.Flag) { spec.retention = spec.retention || f.Name == "retention" })
	if h, ok := spec.verifier.(interface{ RetryHorizon() time.Duration }); ok && spec.retention && o.retention < h.RetryHorizon() {
		return nil, fmt.Errorf("--retention %v is shorter than %s's retry horizon (%v): a retry after it would reach the upstream again; leave --retention out for %v",
			o.retention, kind, h.RetryHorizon(), webhook.DefaultRetention)
	}
	return spec, nil
}

// webhookConfig is the receiver's configuration for the gateway's flags.
func (s *webhookSpec) config(o *serveOptions) webhook.Config {
	cfg := webhook.Config{Verifier: s.verifier, Scope: "webhook-" + s.kind,
		MaxBodyBytes: int64(o.maxBody), Wait: o.wait, Lease: o.lease, MaxInFlight: o.maxInFlight}
	if s.retention {
		cfg.Retention = o.retention
	}
	return cfg
}
