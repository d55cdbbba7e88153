// Package idemhttp is idem at the HTTP boundary: requests and deliveries over HTTP
// whose effects happen once although HTTP, like every network hop, can only be
// retried.
//
// It holds the server middleware of the IETF Idempotency-Key draft (Middleware,
// AtomicMiddleware), the retrying client (Transport), and the webhook sink: an idem.Sink that delivers outbox
// messages to an HTTP endpoint (WebhookSink) signed as Standard Webhooks 1.0, with
// VerifyWebhook for the receiving side. Every delivery carries the message ID as
// its webhook-id and Idempotency-Key, so a receiver
// that records the keys it processed (with an idem.Store, in the transaction of its
// effect) turns the sink's at-least-once delivery into an exactly-once effect.
//
// # The server middleware
//
// Middleware makes a handler safe to retry, with the semantics of the IETF httpapi
// Idempotency-Key draft and of Stripe's API. It applies to Config.Methods (POST
// and PATCH by default); GET, HEAD, OPTIONS, PUT and DELETE pass through untouched
// and uncounted. For a request with an Idempotency-Key header it answers:
//
//	first request    the handler runs; its status, headers (see below) and body
//	                 are stored for Config.Retention (24 h) and sent
//	same key again   the stored response, byte for byte, with Idempotent-Replayed: true
//	still running    409 with Retry-After (seconds until the first request's lease
//	                 ends), or with Config.Wait the stored response once it is there;
//	                 the lease is renewed while the handler runs, so a slow handler
//	                 is never run twice
//	too large        500 ProblemResponseTooLarge: the first response was over
//	                 Config.MaxBodyBytes; it was sent, not stored, and is not rerun
//	other request    422: the same key with another method, path, query, body or
//	                 Config.FingerprintHeaders value
//	bad key          400: empty, repeated, over 255 characters, not printable ASCII;
//	                 also a missing key when Config.RequireKey is set
//	bad scope        400: Config.Scope failed (HeaderScope without its header)
//	body too large   413 (Reject413), or run without a key (PassThrough)
//	overloaded       503 with Retry-After: Config.MaxInFlight keyed requests are in
//	                 flight (default 256); the body is not read
//	store failing    503 with Retry-After; the handler does not run
//	key too old      410 ProblemKeyExpired: a UUIDv7 or ULID key made longer than
//	                 Config.MaxKeyAge ago (default Retention); refused before the
//	                 store is asked, since its record may be forgotten
//	key from future  400 ProblemKeyFromFuture: dated over idemkey.MaxSkew ahead
//	untimed key      400 ProblemUntimedKey, only with Config.RequireTimedKeys
//	deadline passed  412 ProblemDeadlinePassed: Idem-Deadline (idem.HeaderDeadline)
//	                 was before the server's clock when the request arrived (only
//	                 keyed requests are checked)
//
// Keys that carry no time (UUIDv4, intent hashes, free text) cannot be judged by
// age: they are applied again once their record expires after Retention. Require
// timed keys (Config.RequireTimedKeys) where every caller sends them. Refusals are
// counted by reason in idem_http_refused_total{reason} (stale_key, future_key,
// untimed_key, deadline).
//
// The responses the middleware makes itself are RFC 9457 problems
// (application/problem+json with type, title, status and detail; the types are the
// Problem… constants) and are never stored. A request without a key runs as if
// there were no middleware.
//
// Keys are scoped (Config.Scope), so one caller never receives another's response.
// The default scope, CredentialScope, is "cred:" and a SHA-256 hash (128 bits, hex)
// of every credential the request carries: the values of Authorization,
// Proxy-Authorization, Cookie and Config.CredentialHeaders (default X-Api-Key); a
// request with none of them is "anonymous", a scope shared by all such callers.
// With Config.CredentialCookies only the named cookies stand for the Cookie header,
// read as sent: one that Go's cookie parser refuses (a JSON value, a quote, a
// backslash, non-ASCII) is a credential all the same, never "anonymous".
// Credentials are never stored in clear. HeaderScope adds a tenant header to the
// credentials' hash ("tenant:<value>/cred:<hash>"), so a caller who sends another
// tenant's header without its credentials lands in a scope of its own;
// TrustedHeaderScope uses the header alone, which is safe only behind a proxy that
// authenticates callers and sets (and strips) the header. The fingerprint that detects a
// reused key is SHA-256 over a length-prefixed encoding of the method, the escaped
// path, the raw query, each fingerprinted header and the body.
//
// Response headers: with Config.ReplayHeaders nil (the default) every header the
// handler set is stored and replayed except hop-by-hop ones (RFC 9110 §7.6.1:
// Connection, Keep-Alive, Proxy-Connection, TE, Trailer, Transfer-Encoding,
// Upgrade, and the fields Connection names), Content-Length (recomputed), Date,
// Alt-Svc, Proxy-Authenticate, Set-Cookie and Strict-Transport-Security; headers an
// outer middleware set before the handler (request ids, CORS) belong to each
// attempt and are not stored. ReplayHeaders set is an allow-list. Stored headers
// are bounded by MaxStoredHeaderBytes (64 KiB).
//
// What is not stored, so that a retry runs the handler again: a 429 (a rate limit
// is not a result); a 5xx when Config.StoreServerErrors is false (by default it is
// stored, as Stripe does, so a retry sees the same failure); and a handler that
// panics, whose key is released before the panic goes on to net/http. A response
// whose body exceeds Config.MaxBodyBytes is streamed to the client (it cannot be
// refused once the handler ran) and the key keeps a marker, so a retry gets
// ProblemResponseTooLarge instead of a second run.
//
// Limits and memory. The middleware holds, per keyed request in flight, the
// request body (up to MaxBodyBytes), the response body (up to MaxBodyBytes) and,
// while it is stored, the stored record (up to MaxBodyBytes + MaxStoredHeaderBytes):
// about 3 × MaxBodyBytes. Config.MaxInFlight caps those requests (256 by default),
// so with the defaults the middleware's share is at most about 256 × 3.2 MiB ≈
// 820 MiB, and a caller who only sends large bodies can make it hold 256 MiB. The
// memory store adds what it keeps for Retention. The handler's context has no
// deadline of its own (see below): bound slow handlers yourself, as idem serve does
// with --upstream-timeout.
//
// The handler runs with a context detached from the client's
// (context.WithoutCancel): a client that disconnects does not abort the first
// execution, whose result is stored and replayed to the retry. While it runs, the
// key's lease is renewed every Config.Lease/3 (stores implementing idem.Renewer,
// which all of this module's do), so only a holder that died loses its key; a
// renewal refused with idem.ErrLeaseLost is logged (the holder was fenced, and its
// response will not be stored). The response is held
// until it is stored, so the handler's Flush calls have no effect, and a retry that
// arrives after a client saw the response finds it stored (unless storing failed,
// which is logged). Trailers are not stored.
//
// When the effects live in the SQL database of the store, AtomicMiddleware runs
// the handler in a transaction (TxFrom gives it to the handler) that also claims
// the key and stores the response, committed before the client sees the response.
// Concurrent duplicates wait for that transaction in the database instead of
// getting 409.
//
// Metrics (Config.Registerer): idem_http_requests_total{outcome} and
// idem_http_request_duration_seconds{outcome}, with outcome one of executed,
// replayed, conflict, mismatch, rejected, passthrough or error.
//
// # The retrying client
//
// Transport is an http.RoundTripper for the calling side: a POST or PATCH gets one
// Idempotency-Key (the caller's, a key derived from the context's lineage set with
// WithKey, or a fresh UUIDv7) and keeps it on every attempt. Network errors and 409,
// 429, 502, 503 and 504 are retried with exponential backoff and full jitter, no
// sooner than Retry-After, and never later than MaxElapsed after the first attempt,
// which must stay inside the server's retention window (24 h by default) or a late
// retry would be refused (410); 422 and other answers are final. Every attempt
// carries Idem-Deadline, when the caller gives up (see Transport). With the middleware on the
// other side, a request whose response was lost runs once and the retry receives its
// stored response. Attempts tells how many tries a response took.
//
// # The webhook request
//
// Each message is one POST to WebhookConfig.URL, with the payload as the body and
// the headers of Standard Webhooks 1.0 (https://www.standardwebhooks.com), so any
// of that specification's libraries verifies it, beside idem's own:
//
//	webhook-id:        <Message.ID>       the same on every retry of the message
//	webhook-timestamp: <Unix seconds when the request was signed>
//	webhook-signature: v1,<base64 HMAC-SHA256>
//	Idempotency-Key: <Message.ID>         the same as webhook-id
//	Content-Type:    <Message.Headers["Content-Type"]>, else application/octet-stream
//	Idem-Topic:      <Message.Topic>
//	Idem-Header-<Name>: <value>           one per entry of Message.Headers
//	Traceparent, Tracestate               the W3C trace context, when the headers hold one
//	Idem-Timestamp:  <the same Unix seconds as webhook-timestamp>
//	Idem-Signature:  v2=<lowercase hex HMAC-SHA256>   (until the next minor version)
//
// HTTP header names are case-insensitive, and servers may change their case (Go
// canonicalizes "webhook-id" to "Webhook-Id" and "Idem-Header-trace_id" to
// "Idem-Header-Trace_id"), so match names case-insensitively. A 2xx response is
// success; anything else is a failure and the message is sent again later, with the
// same webhook-id and a fresh timestamp and signatures.
//
// # The signature
//
// The v1 signature of Standard Webhooks is the base64 (standard, padded)
// HMAC-SHA256 of
//
//	id + "." + timestamp + "." + body
//
// where id is the webhook-id, timestamp the webhook-timestamp as sent (decimal
// digits) and body the raw request body. Its key is the secret itself, or, for a
// secret "whsec_<base64>", the base64-decoded part, as the specification has it
// (WebhookConfig.Secret). webhook-signature may hold several space-separated
// entries ("v1,… v1,…" during a secret rotation, "v1a,…" Ed25519 ones from other
// senders); one matching v1 entry suffices.
//
// The standard signature covers the id, the timestamp and the body: not
// Idem-Topic, Content-Type, Idempotency-Key nor Idem-Header-*. Do not base trust on
// them: route by what the body says, or, while senders still send it, verify the v2
// Idem-Signature, which covers the topic and Content-Type. VerifyWebhook refuses a
// request whose Idempotency-Key differs from its webhook-id, so a receiver
// deduplicating by either deduplicates by the signed one.
//
// The v2 Idem-Signature, idem's own scheme before the standard, is the HMAC-SHA256
// (lowercase hex), keyed as above, of
//
//	timestamp + "\n" + id + "\n" + topic + "\n" + contentType + "\n" + body
//
// with the Idem-Timestamp, Idempotency-Key, Idem-Topic and Content-Type as sent.
// The separators cannot occur in the fields before the body (IDs, topics and
// header values hold no control characters), so no bytes can be moved from one
// field to another under the same signature. It may hold several comma-separated
// v2= values. The sink sends it beside the standard signature for one minor
// version, as docs/stability.md promises for a new signature scheme, and then
// drops it: receivers move to the standard headers meanwhile.
//
// Each signed header must appear once: a request with two webhook-id (or
// webhook-timestamp, Idempotency-Key, and for v2 Idem-Topic, Idem-Timestamp,
// Content-Type) headers is refused, since the signature covers one and the
// receiver might read the other. A v1= Idem-Signature (idem before v2, without
// Content-Type) is no longer accepted.
//
// Receivers verify with VerifyWebhook (one secret) or VerifyWebhookSecrets (the
// old and the new secret while one is rotated), or with any Standard Webhooks
// library given the whsec_ form of the secret (StandardWebhookSecret): it verifies
// the standard signature when webhook-signature is present, else the v2 one;
// compares in constant time; and refuses a timestamp outside a tolerance (5
// minutes by default), which bounds how long a captured request can be replayed. A
// replay within the tolerance carries a webhook-id the receiver has already
// processed: deduplicate by it (Config.KeyHeader "webhook-id"), behind the
// verification, so a forged request never reaches the store.
//
// # Tracing
//
// With OpenTelemetry (Config.TracerProvider and Config.Propagator, or the global
// ones when nil; idem never installs its own), the middleware makes one span per
// keyed request, idem.http.request: a child of the span already in the request's
// context (an outer otelhttp handler), else a server span whose parent is the
// caller's traceparent header. It carries idem.scope, idem.key, idem.outcome
// (acquired, replayed, in_progress, mismatch; idem.token when acquired) and
// idem.duplicate=true for a replay or a 409; a rejected request or a failed store
// marks it as an error. The handler runs under it, so what it enqueues (package
// outbox) or calls stays in the trace. Requests without a key pass through untraced.
//
// Transport makes a client span per attempt, idem.http.attempt, with idem.key,
// idem.attempt and the status code, and sends its traceparent, so a downstream
// service continues the trace, one span per retry. The webhook sink sends the
// traceparent and tracestate the outbox relay put in the message's headers as the
// request's own, so the receiver continues the trace.
//
// While no span can record (no provider set, or a no-op one) no span is started at
// all: the middleware only passes an incoming traceparent on to the handler, and
// Transport only sends the trace context its request carries, so tracing costs
// nothing when unused (the same allocations per keyed request as without it).
package idemhttp
