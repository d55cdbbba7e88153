// Package chaos holds fault injectors for tests of exactly-once flows: each breaks
// one boundary on purpose, at operations chosen from a seed, so a failure it finds
// can be replayed.
//
//   - Transport, an http.RoundTripper that drops responses after the server
//     executed the request and sends concurrent duplicates;
//   - Sink and Source, wrappers of any idem.Sink / idem.Source that kill the relay
//     between publish and mark, fail publishes, duplicate deliveries, lose acks,
//     and (with Handler) kill consumers before the effect, before the commit and
//     before the ack, or pause them past their lease;
//   - Proxy, an in-process TCP proxy that cuts database and broker
//     connections;
//   - Clock, a clock that jumps, for the component whose expiry it drives;
//   - Injector, which decides from a seed which operation a fault hits.
//
// The package imports nothing of idem but the root package, so a test that needs
// a Clock does not link the rest of idem. The scenario behind idem verify, which
// puts these injectors at every boundary of a whole flow and checks the
// databases, lives with the command (cmd/idem/internal/verify).
package chaos
