package idemsqlite

// WriterExited reports whether s's group-commit writer goroutine has returned.
func WriterExited(s *Store) bool {
	select {
	case <-s.w.exited:
		return true
	default:
		return false
	}
}
