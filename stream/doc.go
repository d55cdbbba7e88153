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
//     events in a SQLite, Postgres or MySQL table (AppendTx joins the business
//     transaction); idemredis.PushStore keeps them in a Redis sorted set
//     scored by seq. This package does not import Redis.
//   - A client connects to GET /stream and sends {"type":"hello","channel":…,
//     "since":N,"client":ID}, the last seq it processed and its id. The server
//     replays everything after N from the store, then streams live, one
//     {"type":"event"} frame per event, or, to a client whose hello adds
//     "batch":true (Client and idem-stream.js do), the events waiting for it in
//     one {"type":"events","events":[…]} frame of up to 256 KiB. The client
//     drops any seq it has seen and, when a seq skips, fetches the gap over REST
//     before going on.
//   - Concurrent Appends share a commit (SQLStore), and the server moves a
//     channel's head only over the seqs it has been told of in order.
//   - The client acks what it processed. A client may have at most
//     ServerConfig.SendBuffer events unacknowledged (its window); one that stays
//     behind is disconnected as a slow consumer and catches up on reconnect.
//     Heartbeat frames and pings detect dead connections both ways.
//   - GET /events?channel=…&since=N returns the same events: the truth when the
//     socket lies.
//   - Store.Trim drops events every known client of their channel acknowledged
//     and events past the retention; a client behind the trim is told to reload
//     (REST 410, close 4409).
//
// Events without data are hints ({"type":"order.updated","id":"o-1"}): the client
// fetches the entity's current state itself, the pattern for data that must never
// be shown stale. Sink lets an outbox relay append to streams, so an event
// committed with the business write reaches the browser without a dual write.
//
// Clients: Client in Go, and a dependency-free JavaScript client that the server
// serves at GET /idem-stream.js (its header documents its API).
//
// # Who may read
//
// ServerConfig.Authorize decides, per request and channel, whether the caller
// may read it, over the socket and GET /events alike. It is required: a server
// without it refuses to be built unless ServerConfig.AllowAnonymous says every
// channel is public. Authorize usually reads a cookie or a token; browsers send
// cookies with a WebSocket handshake from any page, so the server also checks
// the Origin header: a page of another origin than the server's host and
// ServerConfig.OriginPatterns is refused with 403 (the socket and GET /events).
// Requests without an Origin (non-browser clients) are not checked. The server
// sends no CORS headers; add them yourself only for origins you trust.
//
// # Acks and trimming
//
// Each client has an id (a random UUID by default, per Client in Go and per tab
// in JavaScript) and one ack row per channel, created when it connects. Trim
// deletes only what every known client of a channel acknowledged, so a slow
// reader keeps its events while a fast one acks. A store remembers a client for
// ClientExpiry after it was last seen (default 24h; a connected client is
// refreshed every 5 minutes) and at most MaxClients per channel (default 1000,
// the most recently seen): a client forgotten this way is like a new one, and
// if events after its seq were trimmed meanwhile it is told to reload. A client
// can only ack what the server sent it on that connection. Ids are not secrets:
// with ServerConfig.Principal, rows are scoped by the authenticated caller, so
// one who learns another's id cannot move its acks.
//
// # Bad input and bounds
//
// Bad input gets a clear error and the server keeps running: a bad hello (not
// JSON, no channel, a since that is negative, not a whole number, above MaxSeq
// or above the channel's head, a client id over MaxClientID bytes or not
// printable ASCII) closes with 4400 and an error frame; an unknown channel 4404,
// a refused one 4403. A malformed frame or an ack of a seq never sent gets an
// error frame and the connection goes on, up to 16 of them; then it is closed
// with 4400. GET /events answers 400 to the same mistakes.
//
// What one peer can make the server hold is bounded: a frame from a client is
// at most 4 KiB; the hello must come within ServerConfig.HandshakeTimeout (5
// s); a connection reads one channel, holds at most SendBuffer (1024) events
// unacknowledged and at most 64 events read from the store at a time; a client
// that does not read or ack for WriteTimeout (10 s) is disconnected, and one
// that does not answer a ping within Heartbeat (15 s) too. GET /events returns
// at most limit events (default 1000, at most 10000) and stops after about 4
// MiB of event data. The HTTP handshake is bounded by your http.Server (set
// ReadHeaderTimeout).
//
// Sockets are bounded in two pools. Until its hello is authorized, a socket is
// pending: anyone can open one, so pending sockets have a pool of their own
// (ServerConfig.MaxPending, default 1024, idem_stream_pending), and when it is
// full a new handshake closes the oldest pending socket. Sockets that never send
// a hello thus cannot keep out a client that sends it on open, as Client and
// idem-stream.js do. Authorized sockets take the slots of
// ServerConfig.MaxConnections (default 10,000: a handshake while they are all
// taken is refused with 503), at most ServerConfig.MaxPerPrincipal (default 64)
// for one principal (ServerConfig.Principal): one more is closed with 4429
// (CloseTooMany), so one user cannot hold every slot.
//
// # Tracing
//
// With a TracerProvider (ServerConfig.TracerProvider, else the global one once the
// application sets it), each Server.Append is an idem.stream.append span, a child
// of the caller's, with idem.stream.channel, idem.key (the event's Key, if any)
// and idem.stream.seq. Each batch of events a connection writes (up to 64) is one
// idem.stream.push span, with the channel, idem.stream.events written and the
// batch's first and last seq: one span per batch, not per event, so a busy
// channel costs a span per round of its write loop. Push spans are children of
// the connection's request context (an otelhttp handler's span, if any); events
// carry no trace context, so a push is not linked to its appends. With no
// provider set, no span is started.
//
// # Operating
//
// Server.Snapshot lists the channels with their last seq and the connected
// clients with their acked seq and lag, the most lagging first (at most 1000 of
// each, with totals): what idem_stream_unacked sums up, per client.
package stream
