// Package webhook receives webhooks exactly once: it verifies the sender's signature
// (Standard Webhooks 1.0 as sent by Svix and others, Stripe's Stripe-Signature,
// GitHub's X-Hub-Signature-256), takes the event id from where the sender puts it,
// and runs the handler once per event id through an idem.Store.
//
// A signature proves who sent a delivery, not that it arrives once: senders retry an
// event until they see a 2xx, for up to three days (Stripe), and a handler slower
// than the sender's timeout is called again while it still runs. Receiver claims
// the event id before the handler runs and completes it with the handler's
// response afterwards:
//
//   - an invalid, forged or expired signature is answered 400 before any store is
//     touched;
//   - a duplicate of a completed event is answered with the stored response (a
//     2xx) and the handler does not run;
//   - a duplicate that arrives while the first delivery still runs is answered 409
//     with Retry-After (or waits, Config.Wait), never a 2xx: if the first delivery
//     then failed, a 2xx would have told the sender the event was handled, and it
//     would be lost. Stripe and Svix retry any non-2xx later;
//   - a handler that answers 5xx or 429 (or panics) gives the event id back, so the
//     sender's next retry runs it again.
//
// AtomicReceiver records the event id in the same SQL transaction as the handler's
// writes (idemhttp.AtomicMiddleware underneath): a crash leaves both or neither.
//
// Retention must outlive the sender's retry horizon, or a late retry of a handled
// event runs it again: the default is seven days, and a shorter one than the
// verifier's documented horizon is refused unless Config.ShortRetention says so.
package webhook
