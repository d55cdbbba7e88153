package idemhttp

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/redact"
)

var (
	_ idem.Sink            = (*WebhookSink)(nil)
	_ idem.FeatureReporter = (*WebhookSink)(nil)
)

// Headers of a webhook request; see the package documentation.
const (
	// HeaderIdempotencyKey is HeaderKey, the same Idempotency-Key header the
	// middleware reads, named here for webhook receivers.
	HeaderIdempotencyKey = HeaderKey
	HeaderTopic          = "Idem-Topic"
	HeaderPrefix         = "Idem-Header-"
	HeaderTimestamp      = "Idem-Timestamp"
	HeaderSignature      = "Idem-Signature"

	// The headers of Standard Webhooks 1.0 (https://www.standardwebhooks.com),
	// which the sink sends beside idem's own: the message ID, the Unix seconds of
	// signing, and "v1,<base64 HMAC-SHA256 of {id}.{timestamp}.{body}>".
	HeaderWebhookID        = "Webhook-Id"
	HeaderWebhookTimestamp = "Webhook-Timestamp"
	HeaderWebhookSignature = "Webhook-Signature"
)

// WebhookSecretPrefix starts a Standard Webhooks secret: "whsec_" and the base64 of
// the HMAC key.
const WebhookSecretPrefix = "whsec_"

// MinStandardSecret is the shortest HMAC key a whsec_ secret may decode to, in
// bytes: the Standard Webhooks floor (its own example secrets have 24).
const MinStandardSecret = 24

// DefaultWebhookTimeout bounds one webhook request when WebhookConfig.Timeout is 0.
const DefaultWebhookTimeout = 10 * time.Second

// MinWebhookSecret is the shortest WebhookConfig.Secret NewWebhookSink accepts, in
// bytes: an HMAC key shorter than its 32-byte output can be guessed offline from
// one signed request.
const MinWebhookSecret = 32

const backend = "webhook"

// WebhookConfig configures a WebhookSink. URL and Secret are required.
type WebhookConfig struct {
	// URL receives one POST per message. It must be http:// or https:// (use https
	// beyond a trusted network: the signature authenticates, it does not encrypt).
	URL string
	// Secret keys the HMAC-SHA256 signatures of every request; the receiver verifies
	// them with the same secret (VerifyWebhook, or any Standard Webhooks library).
	// Either a Standard Webhooks secret, "whsec_" and the base64 of a random key of
	// at least MinStandardSecret (24) bytes (`echo whsec_$(openssl rand -base64 32)`),
	// whose decoded key signs; or a raw secret of at least MinWebhookSecret (32)
	// bytes (`openssl rand -hex 32`), which is the key itself: a Standard Webhooks
	// library of the receiver then takes StandardWebhookSecret(Secret).
	Secret []byte
	// Client sends the requests. Nil means a client that does not follow
	// redirects: a 301 or 302 would turn the POST into a GET without the body, so a
	// redirect counts as a failed delivery naming its status.
	Client *http.Client
	// Timeout bounds each request, response included. 0 means DefaultWebhookTimeout.
	Timeout time.Duration
}

func (cfg WebhookConfig) withDefaults() (WebhookConfig, error) {
	u, err := url.Parse(cfg.URL)
	switch {
	case cfg.URL == "":
		return cfg, &idem.InputError{Field: "WebhookConfig.URL", Reason: "is empty", Fix: "set the receiver's endpoint, such as https://example.com/hooks/orders"}
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return cfg, &idem.InputError{Field: "WebhookConfig.URL", Reason: fmt.Sprintf("is not an http:// or https:// URL with a host (got %q)", redact.URL(cfg.URL)),
			Fix: "use a URL such as https://example.com/hooks/orders"}
	case cfg.Timeout < 0:
		return cfg, &idem.InputError{Field: "WebhookConfig.Timeout", Reason: fmt.Sprintf("is negative (got %v)", cfg.Timeout),
			Fix: "use 0 for 10s, or how long the receiver may take to answer"}
	}
	if _, err := webhookKey("WebhookConfig.Secret", cfg.Secret); err != nil {
		return cfg, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultWebhookTimeout
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	return cfg, nil
}

// WebhookSink is an idem.Sink that POSTs each message to a URL, signed, with its ID
// as the Idempotency-Key and the webhook-id (see the package documentation for the
// request). It is safe for concurrent use.
type WebhookSink struct {
	cfg WebhookConfig
	url string // redacted, for errors
	key []byte // the HMAC key: Secret, or the decoded part of a whsec_ Secret
	now func() time.Time
}

// NewWebhookSink returns a sink posting to cfg.URL.
func NewWebhookSink(cfg WebhookConfig) (*WebhookSink, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	key, _ := webhookKey("WebhookConfig.Secret", cfg.Secret) // withDefaults checked it
	return &WebhookSink{cfg: cfg, url: redact.URL(cfg.URL), key: bytes.Clone(key), now: time.Now}, nil
}

// Features: no dedup in the transport (the receiver dedups by Idempotency-Key), and
// messages are delivered one after another in publish order.
func (s *WebhookSink) Features() idem.Features {
	return idem.Features{Dedup: false, OrderedPerKey: true}
}

// Publish validates every message first (nothing is sent if one is bad), then POSTs
// them one at a time, in order, each after the previous one was answered with a
// 2xx. It stops at the first failure, a *idem.BackendError naming the message and
// the status or network error: the messages before it were delivered, the ones
// after it were not sent. When some were delivered, the error is an
// *idem.PublishError that says which, so the outbox relay sends only the others
// again. Sending the batch again is safe all the same; the receiver drops what it
// already processed by Idempotency-Key.
func (s *WebhookSink) Publish(ctx context.Context, msgs ...idem.Message) error {
	for i, m := range msgs {
		if err := validate(m); err != nil {
			if len(msgs) > 1 {
				return fmt.Errorf("message %d of the batch: %w", i, err)
			}
			return err
		}
	}
	for i, m := range msgs {
		if err := s.post(ctx, m); err != nil {
			err = &idem.BackendError{Backend: backend, Op: "publish",
				Err: fmt.Errorf("message %q (%d of %d): %w", m.ID, i+1, len(msgs), err)}
			if i == 0 {
				return err
			}
			// The receiver answered 2xx to the ones before: the relay sends
			// only the rest again.
			accepted := make([]bool, len(msgs))
			for j := range i {
				accepted[j] = true
			}
			return &idem.PublishError{Accepted: accepted, Err: err}
		}
	}
	return nil
}

// post delivers one message.
func (s *WebhookSink) post(ctx context.Context, m idem.Message) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.URL, bytes.NewReader(m.Payload))
	if err != nil {
		return err
	}
	ts := strconv.FormatInt(s.now().Unix(), 10)
	req.Header.Set("Content-Type", "application/octet-stream")
	for k, v := range m.Headers {
		req.Header.Set(HeaderPrefix+k, v)
		switch http.CanonicalHeaderKey(k) {
		case "Content-Type", "Traceparent", "Tracestate":
			// The receiver's own: its body type, and the W3C trace context the
			// outbox relay put there, so the receiver continues the trace.
			req.Header.Set(k, v)
		}
	}
	req.Header.Set(HeaderIdempotencyKey, m.ID)
	req.Header.Set(HeaderTopic, m.Topic)
	req.Header.Set(HeaderTimestamp, ts)
	req.Header.Set(HeaderSignature, "v2="+sign(s.key, ts, m.ID, m.Topic, req.Header.Get("Content-Type"), m.Payload))
	req.Header.Set(HeaderWebhookID, m.ID)
	req.Header.Set(HeaderWebhookTimestamp, ts)
	req.Header.Set(HeaderWebhookSignature, "v1,"+base64.StdEncoding.EncodeToString(signStandard(s.key, m.ID, ts, m.Payload)))
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		// A *url.Error names the URL: net/http hides its password, not a secret
		// in its query (?token=…).
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = s.url
		}
		return err
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	return &StatusError{URL: s.url, StatusCode: resp.StatusCode, Status: resp.Status, Body: bodyNote(snippet)}
}

// StatusError is a webhook answered with a status other than 2xx. Publish wraps it
// (errors.As finds it): a health check can report the status without the
// receiver's words, which may quote anything, secrets included.
type StatusError struct {
	URL        string // the webhook's URL, without credentials or secret query values
	StatusCode int    // such as 503
	Status     string // such as "503 Service Unavailable"
	Body       string // the start of the response (256 bytes at most), or ""
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("POST %s: status %s", e.URL, e.Status)
	if e.Body != "" {
		msg += fmt.Sprintf(" (response %q)", e.Body)
	}
	return msg
}

// bodyNote returns the start of an error response, which usually says what is wrong.
func bodyNote(b []byte) string {
	text := strings.TrimSpace(strings.ToValidUTF8(string(b), "?"))
	if text == "" {
		return ""
	}
	return text
}

// validate checks what an HTTP request can carry beyond idem.Message.Validate: the
// topic and headers become header values, and header names become part of names.
func validate(m idem.Message) error {
	if err := m.Validate(); err != nil {
		return err
	}
	if i := badValue(m.Topic); i >= 0 {
		return &idem.InputError{Field: "Message.Topic", Reason: fmt.Sprintf("has a control character at byte %d", i),
			Fix: "it travels in the Idem-Topic header: use printable characters"}
	}
	// HTTP drops the spaces around header values: the receiver would see another
	// Idempotency-Key or topic than the one signed, and refuse every attempt.
	for _, p := range [...]struct{ field, v string }{{"Message.ID", m.ID}, {"Message.Topic", m.Topic}} {
		if padded(p.v) {
			return &idem.InputError{Field: p.field, Reason: fmt.Sprintf("starts or ends with a space or tab (got %q), which HTTP header values drop", p.v),
				Fix: "trim it where it is made: the receiver would see it trimmed and refuse the signature"}
		}
	}
	seen := make(map[string]string, len(m.Headers))
	for k, v := range m.Headers {
		if !isToken(k) {
			return &idem.InputError{Field: "Message.Headers", Reason: fmt.Sprintf("has the name %q, which is not an HTTP header name", k),
				Fix: "use letters, digits and !#$%&'*+-.^_`|~ only"}
		}
		if i := badValue(v); i >= 0 {
			return &idem.InputError{Field: "Message.Headers[" + strconv.Quote(k) + "]", Reason: fmt.Sprintf("has a control character at byte %d", i),
				Fix: "HTTP header values cannot hold line breaks or control characters; encode the value"}
		}
		if padded(v) {
			return &idem.InputError{Field: "Message.Headers[" + strconv.Quote(k) + "]", Reason: "starts or ends with a space or tab, which HTTP header values drop",
				Fix: "trim the value, or encode it (for example base64)"}
		}
		c := http.CanonicalHeaderKey(k)
		if other, dup := seen[c]; dup {
			return &idem.InputError{Field: "Message.Headers", Reason: fmt.Sprintf("has both %q and %q, one HTTP header", other, k),
				Fix: "HTTP header names are case-insensitive: keep one"}
		}
		seen[c] = k
	}
	return nil
}

// badValue returns the index of the first byte an HTTP header value cannot hold, or -1.
func badValue(s string) int {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return i
		}
	}
	return -1
}

// padded reports whether s starts or ends with what HTTP trims from a header value.
func padded(s string) bool {
	return s != "" && (s[0] == ' ' || s[0] == '\t' || s[len(s)-1] == ' ' || s[len(s)-1] == '\t')
}

// isToken reports whether s is an HTTP token (RFC 9110), as header names must be.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}
