package idemhttp

import (
	"crypto/hmac"
	"crypto/sha256"
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
// with secret by a WebhookSink within tolerance of now (0 means DefaultTolerance):
// the v2 signature of its timestamp, Idempotency-Key, Idem-Topic, Content-Type and
// body (see the package documentation), compared in constant time. It returns nil
// for an authentic request, an error matching ErrUnverified otherwise, and an
// *idem.InputError for a secret shorter than MinWebhookSecret (as NewWebhookSink
// refuses to sign with).
//
// A request with two values of a signed header (two Idempotency-Key headers, say)
// is refused: the signature covers one, and the receiver might deduplicate by the
// other. So is a request signed v1 only (by idem before v2): v1 does not cover
// Content-Type, so it cannot tell a request whose Content-Type was changed.
//
// Read the body with a size limit (http.MaxBytesReader) before verifying. A verified
// request may still be a retry: deduplicate by its Idempotency-Key.
func VerifyWebhook(secret []byte, r *http.Request, body []byte, tolerance time.Duration) error {
	if len(secret) == 0 {
		return &idem.InputError{Field: "secret", Reason: "is empty", Fix: "pass the secret the sender signs with (WebhookConfig.Secret)"}
	}
	if len(secret) < MinWebhookSecret {
		// No sender signs with it (NewWebhookSink refuses it), and a short secret is
		// one an attacker can guess: refuse it rather than verify against it.
		return &idem.InputError{Field: "secret", Reason: fmt.Sprintf("has %d bytes; it needs at least %d", len(secret), MinWebhookSecret),
			Fix: "use the sender's secret (WebhookConfig.Secret, at least 32 bytes, such as the output of `openssl rand -hex 32`)"}
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	signed, err := signedHeaders(r)
	if err != nil {
		return err
	}
	ts, id, topic, contentType := signed[0], signed[1], signed[2], signed[3]
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || ts[0] == '+' || ts[0] == '-' {
		return unverified("the %s header is missing or not Unix seconds (got %q)", HeaderTimestamp, ts)
	}
	if age := time.Since(time.Unix(unix, 0)); age > tolerance || age < -tolerance {
		return unverified("the %s is %v away from this server's clock, beyond the tolerance of %v: a replayed request, or clocks out of sync",
			HeaderTimestamp, age.Round(time.Second), tolerance)
	}
	if id == "" {
		return unverified("the %s header is missing", HeaderIdempotencyKey)
	}
	want, _ := hex.DecodeString(sign(secret, ts, id, topic, contentType, body))
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
			if got, err := hex.DecodeString(sig); err == nil && hmac.Equal(got, want) {
				return nil
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

// signedNames are the headers a signature covers, in the order sign takes them.
var signedNames = [...]string{HeaderTimestamp, HeaderIdempotencyKey, HeaderTopic, "Content-Type"}

// signedHeaders returns the value of each of signedNames in r ("" when absent), and
// refuses a request that carries one of them twice: the signature covers the first,
// and code after VerifyWebhook might read another.
func signedHeaders(r *http.Request) ([len(signedNames)]string, error) {
	var vs [len(signedNames)]string
	for i, name := range signedNames {
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
