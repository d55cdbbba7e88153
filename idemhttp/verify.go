package idemhttp

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem"
)

// DefaultTolerance is how far a webhook's timestamp may be from the receiver's clock
// when VerifyWebhook is given a tolerance of 0.
const DefaultTolerance = 5 * time.Minute

// ErrUnverified is matched (errors.Is) by every error of VerifyWebhook about the
// request: answer it with 401 and do not process the body.
var ErrUnverified = errors.New("idemhttp: webhook not verified")

// VerifyWebhook checks that r, whose body the caller has read into body, was signed
// with secret by a WebhookSink within tolerance of now (0 means DefaultTolerance).
// It is VerifyWebhookSecrets with one secret; see there.
func VerifyWebhook(secret []byte, r *http.Request, body []byte, tolerance time.Duration) error {
	return verifyWebhook([][]byte{secret}, r, body, tolerance, time.Now())
}

// VerifyWebhookSecrets checks that r, whose body the caller has read into body, was
// signed with one of secrets within tolerance of now (0 means DefaultTolerance).
// Pass the new and the old secret while the sender's secret is rotated. A secret
// is a whsec_ secret of Standard Webhooks (the HMAC key is its base64-decoded
// part, at least MinStandardSecret bytes) or the raw key (at least
// MinWebhookSecret bytes), as WebhookConfig.Secret.
//
// A request carrying a webhook-signature header is verified as Standard Webhooks
// 1.0: the v1 signature (base64 HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{body}")
// of one of its space-separated entries must match, other versions (v1a,
// Ed25519) are skipped, and an Idempotency-Key, if present, must equal the signed
// webhook-id. A request without one (from an idem before 0.x, which signed only
// Idem-Signature) is verified by its v2 Idem-Signature (see the package
// documentation). Either way the signatures are compared in constant time. It
// returns nil for an authentic request, an error matching ErrUnverified
// otherwise, and an *idem.InputError for a missing or malformed secret.
//
// A request with two values of a signed header (two Idempotency-Key or webhook-id
// headers, say) is refused: the signature covers one, and the receiver might
// deduplicate by the other. So is a request signed v1= only (Idem-Signature of idem
// before v2): it does not cover Content-Type.
//
// The standard signature does not cover Idem-Topic, Content-Type nor Idem-Header-*:
// do not base trust on them; a receiver that routes by topic takes it from the
// body, or verifies the v2 Idem-Signature (which covers the topic and
// Content-Type) while senders still send it.
//
// Read the body with a size limit (http.MaxBytesReader) before verifying. A verified
// request may still be a retry: deduplicate by its webhook-id (Config.KeyHeader),
// which is also its Idempotency-Key.
func VerifyWebhookSecrets(secrets [][]byte, r *http.Request, body []byte, tolerance time.Duration) error {
	return verifyWebhook(secrets, r, body, tolerance, time.Now())
}

func verifyWebhook(secrets [][]byte, r *http.Request, body []byte, tolerance time.Duration, now time.Time) error {
	if len(secrets) == 0 {
		return &idem.InputError{Field: "secrets", Reason: "is empty", Fix: "pass the secret the sender signs with (WebhookConfig.Secret)"}
	}
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		k, err := webhookKey("secret", s)
		if err != nil {
			return err
		}
		keys[i] = k
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	if len(r.Header.Values(HeaderWebhookSignature)) > 0 {
		return verifyStandard(keys, r, body, tolerance, now)
	}
	signed, err := signedHeaders(r, signedNames[:])
	if err != nil {
		return err
	}
	ts, id, topic, contentType := signed[0], signed[1], signed[2], signed[3]
	if err := checkTimestamp(HeaderTimestamp, ts, tolerance, now); err != nil {
		return err
	}
	if id == "" {
		return unverified("the %s header is missing", HeaderIdempotencyKey)
	}
	found, v1 := false, false
	for _, v := range r.Header.Values(HeaderSignature) {
		for part := range strings.SplitSeq(v, ",") {
			part = strings.TrimSpace(part)
			v1 = v1 || strings.HasPrefix(part, "v1=")
			sig, ok := strings.CutPrefix(part, "v2=")
			if !ok {
				continue
			}
			found = true
			got, err := hex.DecodeString(sig)
			if err != nil {
				continue
			}
			for _, k := range keys {
				want, _ := hex.DecodeString(sign(k, ts, id, topic, contentType, body))
				if hmac.Equal(got, want) {
					return nil
				}
			}
		}
	}
	switch {
	case !found && v1:
		return unverified("the %s has only v1= signatures, which do not cover Content-Type and are no longer accepted: "+
			"upgrade the sender to an idem that signs v2", HeaderSignature)
	case !found:
		return unverified("the %s header has no v2= signature", HeaderSignature)
	}
	return unverified("the %s does not match: the secret differs from the sender's, or the request was altered", HeaderSignature)
}

// standardNames are the single-valued headers of a Standard Webhooks request.
var standardNames = [...]string{HeaderWebhookID, HeaderWebhookTimestamp, HeaderIdempotencyKey}

// verifyStandard verifies the Standard Webhooks 1.0 signature of r.
func verifyStandard(keys [][]byte, r *http.Request, body []byte, tolerance time.Duration, now time.Time) error {
	signed, err := signedHeaders(r, standardNames[:])
	if err != nil {
		return err
	}
	id, ts, idemKey := signed[0], signed[1], signed[2]
	if id == "" {
		return unverified("the %s header is missing", HeaderWebhookID)
	}
	if err := checkTimestamp(HeaderWebhookTimestamp, ts, tolerance, now); err != nil {
		return err
	}
	if idemKey != "" && idemKey != id {
		// The standard signature covers webhook-id, not Idempotency-Key: a receiver
		// deduplicating by the latter would run a replay with another key again.
		return unverified("the %s (%q) differs from the signed %s (%q)", HeaderIdempotencyKey, idemKey, HeaderWebhookID, id)
	}
	wants := make([][]byte, len(keys))
	for i, k := range keys {
		wants[i] = signStandard(k, id, ts, body)
	}
	found := false
	for _, v := range r.Header.Values(HeaderWebhookSignature) {
		for entry := range strings.FieldsSeq(v) {
			sig, ok := strings.CutPrefix(entry, "v1,")
			if !ok {
				continue // v1a (Ed25519) and versions to come
			}
			found = true
			got, err := base64.StdEncoding.DecodeString(sig)
			if err != nil {
				continue
			}
			for _, want := range wants {
				if hmac.Equal(got, want) {
					return nil
				}
			}
		}
	}
	if !found {
		return unverified("the %s header has no v1, signature", HeaderWebhookSignature)
	}
	return unverified("the %s does not match: the secret differs from the sender's, or the request was altered", HeaderWebhookSignature)
}

// checkTimestamp checks that ts, the value of header, is Unix seconds within
// tolerance of now.
func checkTimestamp(header, ts string, tolerance time.Duration, now time.Time) error {
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || ts[0] == '+' || ts[0] == '-' {
		return unverified("the %s header is missing or not Unix seconds (got %q)", header, ts)
	}
	if age := now.Sub(time.Unix(unix, 0)); age > tolerance || age < -tolerance {
		return unverified("the %s is %v away from this server's clock, beyond the tolerance of %v: a replayed request, or clocks out of sync",
			header, age.Round(time.Second), tolerance)
	}
	return nil
}

// signedNames are the headers a signature covers, in the order sign takes them.
var signedNames = [...]string{HeaderTimestamp, HeaderIdempotencyKey, HeaderTopic, "Content-Type"}

// signedHeaders returns the value of each of names in r ("" when absent), and
// refuses a request that carries one of them twice: the signature covers the first,
// and code after VerifyWebhook might read another.
func signedHeaders(r *http.Request, names []string) ([]string, error) {
	vs := make([]string, len(names))
	for i, name := range names {
		switch all := r.Header.Values(name); len(all) {
		case 0:
		case 1:
			vs[i] = all[0]
		default:
			return vs, unverified("the request has %d %s headers; a signed request has one", len(all), name)
		}
	}
	return vs, nil
}

func unverified(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUnverified}, args...)...)
}

// sign returns the lowercase hex v2 signature of a request.
func sign(secret []byte, timestamp, id, topic, contentType string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(timestamp + "\n" + id + "\n" + topic + "\n" + contentType + "\n"))
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}

// signStandard returns the Standard Webhooks v1 signature of a request, before its
// base64 encoding: HMAC-SHA256 of "{id}.{timestamp}.{body}".
func signStandard(key []byte, id, timestamp string, body []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "."))
	mac.Write(body)
	return mac.Sum(nil)
}

// webhookKey returns the HMAC key of secret, which field names in errors: the
// base64-decoded part of a whsec_ secret (Standard Webhooks), else secret itself.
func webhookKey(field string, secret []byte) ([]byte, error) {
	if len(secret) == 0 {
		return nil, &idem.InputError{Field: field, Reason: "is empty",
			Fix: "set the random secret shared with the receiver (a whsec_ secret, or 32+ bytes such as the output of `openssl rand -hex 32`): anyone who can reach the URL could forge unsigned webhooks"}
	}
	if enc, ok := bytes.CutPrefix(secret, []byte(WebhookSecretPrefix)); ok {
		key, err := base64.StdEncoding.DecodeString(string(enc))
		if err != nil {
			return nil, &idem.InputError{Field: field, Reason: "starts with whsec_ but the rest is not standard base64",
				Fix: "copy the whole whsec_ secret, or make one with `echo whsec_$(openssl rand -base64 32)`"}
		}
		if len(key) < MinStandardSecret {
			return nil, &idem.InputError{Field: field, Reason: fmt.Sprintf("decodes to %d bytes; a whsec_ secret needs at least %d", len(key), MinStandardSecret),
				Fix: "make one with `echo whsec_$(openssl rand -base64 32)`: a short secret can be guessed from one signed request"}
		}
		return key, nil
	}
	if len(secret) < MinWebhookSecret {
		// A short secret is one an attacker can guess: refuse it rather than sign
		// or verify with it.
		return nil, &idem.InputError{Field: field, Reason: fmt.Sprintf("has %d bytes; it needs at least %d", len(secret), MinWebhookSecret),
			Fix: "use at least 32 random bytes shared with the receiver, such as the output of `openssl rand -hex 32`, or a whsec_ secret: a short secret can be guessed from one signed request"}
	}
	return secret, nil
}

// StandardWebhookSecret returns the whsec_ form of secret, the form Standard
// Webhooks libraries take: secret itself when it is one, else "whsec_" and the
// base64 of the raw key. A receiver that verifies a sink configured with a raw
// secret with such a library configures this. It is a credential: never log it.
func StandardWebhookSecret(secret []byte) string {
	if bytes.HasPrefix(secret, []byte(WebhookSecretPrefix)) {
		return string(secret)
	}
	return WebhookSecretPrefix + base64.StdEncoding.EncodeToString(secret)
}
