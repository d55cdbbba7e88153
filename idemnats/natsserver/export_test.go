package natsserver

// JetStreamSync returns how the server's JetStream syncs its file store: always
// (before each ack), or in the background every interval.
func JetStreamSync(s *Server) (always bool, interval string) {
	cfg := s.ns.JetStreamConfig()
	return cfg.SyncAlways, cfg.SyncInterval.String()
}
