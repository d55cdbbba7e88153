package webhook

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/idemhq/idem"
)

// Verifier checks a delivery's signature and returns its event id: the key the
// Receiver runs the handler once for. now judges the delivery's timestamp. A
// delivery that fails verification gets an error wrapping ErrVerification; the
// error never contains a secret.
type Verifier interface {
	Verify(h http.Header, body []byte, now time.Time) (eventID string, err error)
}

// ErrVerification is wrapped by every error a Verifier returns for a delivery that
// must be refused (missing or malformed header, bad signature, stale timestamp).
var ErrVerification = errors.New("webhook: verification failed")

// DefaultTolerance is how far a delivery's timestamp may be from now, either way,
// when a verifier's Tolerance is zero: five minutes, as the Standard Webhooks spec
// and Stripe's libraries use.
const DefaultTolerance = 5 * time.Minute

// MaxEventIDLen bounds an event id, as idemkey bounds an Idempotency-Key.
const MaxEventIDLen = 255

// maxSignatures bounds the signatures one header may carry, so a hostile header
// cannot make the verifier compute thousands of HMACs.
const maxSignatures = 16

func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrVerification}, args...)...)
}

// checkTimestamp parses a Unix-seconds timestamp and checks it is within tol of now.
func checkTimestamp(header, s string, now time.Time, tol time.Duration) error {
	if tol == 0 {
		tol = DefaultTolerance
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return refuse("%s %q is not a Unix time in seconds", header, truncate(s))
	}
	if tol < 0 {
		return nil
	}
	d := now.Sub(time.Unix(sec, 0))
	switch {
	case d > tol:
		return refuse("%s is %s old, more than the tolerance %s: the delivery is stale or replayed", header, d.Round(time.Second), tol)
	case -d > tol:
		return refuse("%s is %s in the future, more than the tolerance %s: check the clocks", header, (-d).Round(time.Second), tol)
	}
	return nil
}

// checkEventID refuses an id the store could not key on.
func checkEventID(field, id string) error {
	if id == "" {
		return refuse("%s is missing or empty", field)
	}
	if len(id) > MaxEventIDLen {
		return refuse("%s is longer than %d bytes (got %d)", field, MaxEventIDLen, len(id))
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= 0x20 || c > 0x7e {
			return refuse("%s has byte 0x%02X at byte %d: an event id is printable ASCII without spaces", field, c, i)
		}
	}
	return nil
}

// single returns the one value of header name, refusing a missing or repeated one.
func single(h http.Header, names ...string) (string, string, error) {
	for _, name := range names {
		switch vs := h.Values(name); len(vs) {
		case 0:
			continue
		case 1:
			return vs[0], name, nil
		default:
			return "", name, refuse("%s is sent %d times: a delivery carries it once", name, len(vs))
		}
	}
	return "", names[0], refuse("%s header is missing", names[0])
}

func truncate(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}

// withSecrets returns v once add has taken each of its secrets, with the field
// that names the secret by position (never by value) in add's error; the first
// error fails it: the one loop of the constructors GitHub, Stripe and Standard. No
// secret at all is an *idem.InputError whose Fix is fix.
func withSecrets[V any](v *V, verifier string, secrets []string, fix string, add func(v *V, field, secret string) error) (*V, error) {
	if len(secrets) == 0 {
		return nil, &idem.InputError{Field: "webhook." + verifier + " secrets", Reason: "are none", Fix: fix}
	}
	for i, s := range secrets {
		if err := add(v, fmt.Sprintf("webhook.%s secret %d", verifier, i+1), s); err != nil {
			return nil, err
		}
	}
	return v, nil
}
