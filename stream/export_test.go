package stream

// SharedAppends reports how many transactions of s committed more than one Append.
func SharedAppends[Tx any](s *SQLStore[Tx]) int64 { return s.shared.Load() }
