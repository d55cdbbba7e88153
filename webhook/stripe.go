package webhook

import (
	"crypto/hmac"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/idemhq/idem"
)

// StripeHorizon is how long Stripe retries an event in live mode: three days.
const StripeHorizon = 72 * time.Hour

// StripeVerifier verifies Stripe's Stripe-Signature header (t=<unix>,v1=<hex>…) and
// takes the event id from the JSON body's top-level "id" (evt_…). Build it with
// Stripe.
type StripeVerifier struct {
	// Tolerance is how far t may be from now, either way. Zero means
	// DefaultTolerance (300 s, as Stripe's libraries); negative turns it off.
	Tolerance time.Duration

	keys [][]byte
}

var _ Verifier = (*StripeVerifier)(nil)

// Stripe returns a verifier for the endpoint's signing secrets (whsec_…, used
// whole as the HMAC key, as Stripe does). Pass the old and the new secret while
// Stripe signs with both during a rotation.
func Stripe(secrets ...string) (*StripeVerifier, error) {
	return withSecrets(&StripeVerifier{}, "Stripe", secrets, "pass the endpoint's signing secret (whsec_…) from the Stripe dashboard or `stripe listen`",
		(*StripeVerifier).addSecret)
}

// addSecret adds one of Stripe's secrets, named field in its error, whole as an
// HMAC key.
func (v *StripeVerifier) addSecret(field, s string) error {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "whsec_") || len(s) == len("whsec_") {
		return &idem.InputError{Field: field,
			Reason: "does not start with whsec_", Fix: "pass the endpoint's signing secret, not an API key (sk_…)"}
	}
	v.keys = append(v.keys, []byte(s))
	return nil
}

// RetryHorizon is StripeHorizon: Receiver refuses a shorter retention.
func (v *StripeVerifier) RetryHorizon() time.Duration { return StripeHorizon }

// Verify implements Verifier.
func (v *StripeVerifier) Verify(h http.Header, body []byte, now time.Time) (string, error) {
	header, _, err := single(h, "Stripe-Signature")
	if err != nil {
		return "", err
	}
	ts, sigs, err := ParseStripeSignature(header)
	if err != nil {
		return "", err
	}
	if err := checkTimestamp("Stripe-Signature t", ts, now, v.Tolerance); err != nil {
		return "", err
	}
	content := make([]byte, 0, len(ts)+1+len(body))
	content = append(append(append(content, ts...), '.'), body...)
	if !anyMatch(v.keys, content, sigs) {
		return "", refuse("no v1 signature in Stripe-Signature matches a configured secret: the delivery is forged, or signed with a secret this endpoint does not have")
	}
	var event struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &event); err != nil {
		return "", refuse("the body is not a JSON object with an id: %v", err)
	}
	if err := checkEventID("the body's id", event.ID); err != nil {
		return "", err
	}
	return event.ID, nil
}

func anyMatch(keys [][]byte, content []byte, sigs [][]byte) bool {
	for _, key := range keys {
		mac := Sign(key, content)
		for _, s := range sigs {
			if hmac.Equal(mac, s) {
				return true
			}
		}
	}
	return false
}

// ParseStripeSignature parses a Stripe-Signature header: comma-separated k=v
// pairs, one t (Unix seconds) and one or more v1 (hex HMAC-SHA256); v0 and unknown
// schemes are ignored. Errors wrap ErrVerification.
func ParseStripeSignature(header string) (timestamp string, v1 [][]byte, err error) {
	parts := strings.Split(header, ",")
	if len(parts) > 2*maxSignatures {
		return "", nil, refuse("Stripe-Signature has %d parts, more than %d", len(parts), 2*maxSignatures)
	}
	for _, p := range parts {
		k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok {
			return "", nil, refuse("Stripe-Signature part %q is not key=value", truncate(p))
		}
		switch k {
		case "t":
			if timestamp != "" {
				return "", nil, refuse("Stripe-Signature has t twice")
			}
			timestamp = val
		case "v1":
			sig, err := hex.DecodeString(val)
			if err != nil {
				return "", nil, refuse("Stripe-Signature v1 is not hex")
			}
			v1 = append(v1, sig)
		}
	}
	switch {
	case timestamp == "":
		return "", nil, refuse("Stripe-Signature has no t=<timestamp>")
	case len(v1) == 0:
		return "", nil, refuse("Stripe-Signature has no v1 signature")
	}
	return timestamp, v1, nil
}
