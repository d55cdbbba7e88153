package idemamqp

// Arrived is how many deliveries the broker has sent to s's current channel,
// handed out by Receive or not.
func Arrived(s *Source) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess == nil {
		return 0
	}
	return s.sess.arrived.Load()
}
