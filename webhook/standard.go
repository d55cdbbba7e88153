package webhook

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"
	"time"

	"github.com/idemhq/idem"
)

// StandardHorizon is how long a Standard Webhooks sender retries an event: Svix's
// schedule (5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h) spans about 28 hours.
const StandardHorizon = 28 * time.Hour

// StandardVerifier verifies Standard Webhooks 1.0 deliveries: webhook-id,
// webhook-timestamp and webhook-signature (svix-id, svix-timestamp and
// svix-signature are accepted too, as Svix's libraries do). The event id is
// webhook-id. Build it with Standard.
type StandardVerifier struct {
	// Tolerance is how far webhook-timestamp may be from now, either way. Zero means
	// DefaultTolerance; negative turns the check off (only for tests replaying
	// recorded deliveries).
	Tolerance time.Duration

	hmacKeys [][]byte
	pubKeys  []ed25519.PublicKey
}

var _ Verifier = (*StandardVerifier)(nil)

// Standard returns a verifier for the given secrets: whsec_<base64> symmetric
// secrets (signatures "v1,") and whpk_<base64> Ed25519 public keys (signatures
// "v1a,"). Several secrets verify during a rotation: a delivery passes when any of
// its signatures matches any secret. A malformed secret is an *idem.InputError
// naming its position, never its value.
func Standard(secrets ...string) (*StandardVerifier, error) {
	return withSecrets(&StandardVerifier{}, "Standard", secrets,
		"pass the endpoint's signing secret (whsec_…) as the sender shows it, or its public key (whpk_…)", (*StandardVerifier).addSecret)
}

// addSecret adds one of Standard's secrets, named field in its error, as an HMAC
// key (whsec_) or an Ed25519 public key (whpk_).
func (v *StandardVerifier) addSecret(field, s string) error {
	s = strings.TrimSpace(s)
	switch {
	case strings.HasPrefix(s, "whsec_"):
		key, err := base64.StdEncoding.DecodeString(s[len("whsec_"):])
		if err != nil || len(key) == 0 {
			return &idem.InputError{Field: field, Reason: "is not whsec_ followed by base64",
				Fix: "copy the whole secret from the sender's dashboard"}
		}
		v.hmacKeys = append(v.hmacKeys, key)
	case strings.HasPrefix(s, "whpk_"):
		key, err := base64.StdEncoding.DecodeString(s[len("whpk_"):])
		if err != nil || len(key) != ed25519.PublicKeySize {
			return &idem.InputError{Field: field, Reason: "is not whpk_ followed by a base64 32-byte Ed25519 public key",
				Fix: "copy the whole public key from the sender's dashboard"}
		}
		v.pubKeys = append(v.pubKeys, ed25519.PublicKey(key))
	case strings.HasPrefix(s, "whsk_"):
		return &idem.InputError{Field: field, Reason: "is an Ed25519 signing key (whsk_), which only the sender should hold",
			Fix: "give the receiver the public key (whpk_) instead, and rotate the leaked signing key"}
	default:
		return &idem.InputError{Field: field, Reason: "does not start with whsec_ or whpk_",
			Fix: "pass the secret exactly as the sender shows it, prefix included"}
	}
	return nil
}

// RetryHorizon is StandardHorizon: Receiver refuses a shorter retention.
func (v *StandardVerifier) RetryHorizon() time.Duration { return StandardHorizon }

// Verify implements Verifier.
func (v *StandardVerifier) Verify(h http.Header, body []byte, now time.Time) (string, error) {
	id, idName, err := single(h, "webhook-id", "svix-id")
	if err != nil {
		return "", err
	}
	if err := checkEventID(idName, id); err != nil {
		return "", err
	}
	ts, tsName, err := single(h, "webhook-timestamp", "svix-timestamp")
	if err != nil {
		return "", err
	}
	if err := checkTimestamp(tsName, ts, now, v.Tolerance); err != nil {
		return "", err
	}
	sigs, sigName, err := single(h, "webhook-signature", "svix-signature")
	if err != nil {
		return "", err
	}
	entries, err := ParseStandardSignatures(sigs)
	if err != nil {
		return "", err
	}
	content := make([]byte, 0, len(id)+len(ts)+len(body)+2)
	content = append(append(append(append(append(content, id...), '.'), ts...), '.'), body...)
	for _, e := range entries {
		switch e.Version {
		case "v1":
			for _, key := range v.hmacKeys {
				if hmac.Equal(e.Signature, Sign(key, content)) {
					return id, nil
				}
			}
		case "v1a":
			for _, key := range v.pubKeys {
				if len(e.Signature) == ed25519.SignatureSize && ed25519.Verify(key, content, e.Signature) {
					return id, nil
				}
			}
		}
	}
	return "", refuse("no signature in %s matches a configured secret: the delivery is forged, or signed with a secret this endpoint does not have (add the new one during a rotation)", sigName)
}

// Sign is the v1 signature: HMAC-SHA256 of content under key.
func Sign(key, content []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(content)
	return m.Sum(nil)
}

// Signature is one entry of a webhook-signature header.
type Signature struct {
	Version   string // "v1" (HMAC-SHA256), "v1a" (Ed25519), or another the verifier ignores
	Signature []byte // decoded from base64
}

// ParseStandardSignatures parses a webhook-signature header: space-separated
// "<version>,<base64>" entries. Entries of unknown versions are kept (and ignored
// by Verify); a malformed entry, none in base64, or more than 16, is an error wrapping
// ErrVerification.
func ParseStandardSignatures(header string) ([]Signature, error) {
	fields := strings.Fields(header)
	if len(fields) == 0 {
		return nil, refuse("webhook-signature is empty")
	}
	if len(fields) > maxSignatures {
		return nil, refuse("webhook-signature has %d entries, more than %d", len(fields), maxSignatures)
	}
	out := make([]Signature, 0, len(fields))
	for i, f := range fields {
		version, b64, ok := strings.Cut(f, ",")
		if !ok || version == "" {
			return nil, refuse("webhook-signature entry %d is not <version>,<base64>", i+1)
		}
		sig, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			if version == "v1" || version == "v1a" {
				return nil, refuse("webhook-signature entry %d (%s) is not base64", i+1, version)
			}
			continue // a future scheme may encode otherwise
		}
		out = append(out, Signature{Version: version, Signature: sig})
	}
	if len(out) == 0 {
		return nil, refuse("webhook-signature has no entry in base64")
	}
	return out, nil
}
