// Package idemhttp is idem at the HTTP boundary: requests and deliveries over HTTP
// whose effects happen once although HTTP, like every network hop, can only be
// retried.
//
// Today it holds the webhook sink: an idem.Sink that delivers outbox messages to an
// HTTP endpoint (WebhookSink), and VerifyWebhook for the receiving side. Every
// delivery carries the message ID as its Idempotency-Key, so a receiver that
// records the keys it processed (with an idem.Store, in the transaction of its
// effect) turns the sink's at-least-once delivery into an exactly-once effect. The
// server middleware and the retrying client of the IETF Idempotency-Key draft will
// join it here (issue #3).
//
// # The webhook request
//
// Each message is one POST to WebhookConfig.URL, with the payload as the body and
// these headers:
//
//	Idempotency-Key: <Message.ID>         the same on every retry of the message
//	Content-Type:    <Message.Headers["Content-Type"]>, else application/octet-stream
//	Idem-Topic:      <Message.Topic>
//	Idem-Header-<Name>: <value>           one per entry of Message.Headers
//	Idem-Timestamp:  <Unix seconds when the request was signed>
//	Idem-Signature:  v1=<lowercase hex HMAC-SHA256>
//
// HTTP header names are case-insensitive, and servers may change their case (Go
// canonicalizes "Idem-Header-trace_id" to "Idem-Header-Trace_id"), so match the
// names of Idem-Header-* case-insensitively. A 2xx response is success; anything
// else is a failure and the message is sent again later, with the same
// Idempotency-Key and a fresh timestamp and signature.
//
// # The signature
//
// The v1 signature is the HMAC-SHA256, keyed with the shared secret, of
//
//	timestamp + "\n" + id + "\n" + topic + "\n" + body
//
// where timestamp is the Idem-Timestamp value as sent (decimal digits), id the
// Idempotency-Key, topic the Idem-Topic, and body the raw request body. The
// separators cannot occur in the fields before the body (IDs, topics and header
// values hold no control characters), so no bytes can be moved from one field to
// another under the same signature. Idem-Header-* and Content-Type are not signed:
// do not base trust on them. Idem-Signature may hold several comma-separated v1=
// values (for secret rotation); one matching value suffices.
//
// Receivers verify with VerifyWebhook (or the steps above in another language):
// recompute the HMAC over the raw body, compare in constant time, and refuse a
// timestamp outside a tolerance (5 minutes by default), which bounds how long a
// captured request can be replayed. A replay within the tolerance carries an
// Idempotency-Key the receiver has already processed.
package idemhttp
