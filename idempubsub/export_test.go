package idempubsub

// Buffered is how many pulled messages s holds for its next Receive: a test waits
// for it, not for the fake server's count, which rises before the Pull's answer
// reaches the source.
func (s *Source) Buffered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.buf)
}
