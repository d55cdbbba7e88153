package webhook

import (
	"encoding/hex"
	"net/http"
	"strings"
	"time"

	"github.com/idemhq/idem"
)

// GitHubHorizon is how far back GitHub lets a delivery be redelivered: three days.
// GitHub does not retry failed deliveries itself.
const GitHubHorizon = 72 * time.Hour

// GitHubVerifier verifies GitHub-style deliveries: X-Hub-Signature-256:
// sha256=<hex HMAC-SHA256 of the body>, with the event id in X-GitHub-Delivery.
// The scheme signs no timestamp, so a captured delivery verifies forever; the
// Receiver still runs it only once within its retention. Build it with GitHub.
type GitHubVerifier struct {
	keys [][]byte
}

var _ Verifier = (*GitHubVerifier)(nil)

// GitHub returns a verifier for the webhook's secrets (used as-is as HMAC keys).
func GitHub(secrets ...string) (*GitHubVerifier, error) {
	return withSecrets(&GitHubVerifier{}, "GitHub", secrets, "pass the secret set on the webhook in the repository's settings",
		(*GitHubVerifier).addSecret)
}

// addSecret adds one of GitHub's secrets as an HMAC key.
func (v *GitHubVerifier) addSecret(_, s string) error {
	if s == "" {
		return &idem.InputError{Field: "webhook.GitHub secrets", Reason: "include an empty one",
			Fix: "set a secret on the webhook: without one GitHub signs nothing"}
	}
	v.keys = append(v.keys, []byte(s))
	return nil
}

// RetryHorizon is GitHubHorizon.
func (v *GitHubVerifier) RetryHorizon() time.Duration { return GitHubHorizon }

// Verify implements Verifier; now is unused, as the scheme has no timestamp.
func (v *GitHubVerifier) Verify(h http.Header, body []byte, _ time.Time) (string, error) {
	id, _, err := single(h, "X-GitHub-Delivery")
	if err != nil {
		return "", err
	}
	if err := checkEventID("X-GitHub-Delivery", id); err != nil {
		return "", err
	}
	sig, _, err := single(h, "X-Hub-Signature-256")
	if err != nil {
		return "", err
	}
	hexSig, ok := strings.CutPrefix(sig, "sha256=")
	if !ok {
		return "", refuse("X-Hub-Signature-256 does not start with sha256=")
	}
	mac, err := hex.DecodeString(hexSig)
	if err != nil {
		return "", refuse("X-Hub-Signature-256 is not sha256=<hex>")
	}
	if !anyMatch(v.keys, body, [][]byte{mac}) {
		return "", refuse("X-Hub-Signature-256 does not match a configured secret: the delivery is forged, or signed with another secret")
	}
	return id, nil
}
