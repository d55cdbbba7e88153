// Package stream pushes events to browsers and other clients over WebSocket so
// that each client sees every event of its channel once, in order, across
// disconnects, with the database as the source of truth.
//
// WebSocket delivery alone is at-most-once: a client that is reconnecting misses
// what was pushed meanwhile, and a push retried after a doubtful write is shown
// twice. stream fixes both with sequence numbers:
//
//   - Every event is appended to its channel (one per user, say) in a Store, which
//     assigns the next seq at append time: 1, 2, 3… with no gaps. SQLStore keeps
//     events in a SQLite or Postgres table (AppendTx joins the business
//     transaction); RedisStore keeps them in a sorted set scored by seq.
//   - A client connects to GET /stream and sends {"type":"hello","channel":…,
//     "since":N}, the last seq it processed. The server replays everything after
//     N from the store, then streams live. The client drops any seq it has seen
//     and, when a seq skips, fetches the gap over REST before going on.
//   - The client acks what it processed. A client may have at most
//     ServerConfig.SendBuffer events unacknowledged (its window); one that stays
//     behind is disconnected as a slow consumer and catches up on reconnect.
//     Heartbeat frames and pings detect dead connections both ways.
//   - GET /events?channel=…&since=N returns the same events: the truth when the
//     socket lies.
//   - Store.Trim drops events every client acknowledged and events past the
//     retention; a client behind the trim is told to reload (REST 410, close 4409).
//
// Events without data are hints ({"type":"order.updated","id":"o-1"}): the client
// fetches the entity's current state itself, the pattern for data that must never
// be shown stale. Sink lets an outbox relay append to streams, so an event
// committed with the business write reaches the browser without a dual write.
//
// Clients: Client in Go, and a dependency-free JavaScript client that the server
// serves at GET /idem-stream.js (its header documents its API). Authorization is
// ServerConfig.Authorize: a channel is read only by a caller it allows.
//
// Bad input gets a clear error and the server keeps running: a bad hello closes
// with 4400 and an error frame, an unknown channel 4404, a refused one 4403; a
// malformed frame or an ack of a seq never sent gets an error frame and the
// connection goes on.
package stream
