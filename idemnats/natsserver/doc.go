// Package natsserver runs nats-server with JetStream in the process: the broker of
// idem's default setup (idem verify) and of the tests of idemnats. It is apart from idemnats so that an application that only publishes
// and consumes through idemnats links the NATS client, not a whole server.
//
// StartServer runs nats-server in the process with JetStream on a file store in
// ServerConfig.Dir, listening on 127.0.0.1 on a free port by default. Streams,
// messages and consumer positions survive a restart on the same Dir. Server.Connect
// connects in process, without TCP. Its logs go to ServerConfig.Logger, and a
// failure to start (an unusable Dir) is returned as an error rather than logged.
//
// The embedded server syncs every write to disk before its ack (sync_interval:
// always) unless ServerConfig.SyncInterval asks for the periodic sync; the
// idemnats package documentation says why an ack must mean stored.
//
// StartCluster runs a JetStream cluster in the process, for tests of leader
// elections: nodes can be killed and restarted, and the routes between them cut.
package natsserver

// backend names NATS in the errors of the embedded server, as idemnats does.
const backend = "nats"
