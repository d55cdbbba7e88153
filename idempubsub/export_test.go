package idempubsub

// Buffered is how many pulled messages s holds for its next Receive: a test waits
// for it, not for the fake server's count, which rises before the Pull's answer
// reaches the source.
func (s *Source) Buffered() int {
	s.pump.Mu.Lock()
	defer s.pump.Mu.Unlock()
	return len(s.pump.Buf)
}
