package testsvc

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that goroutines under test (a logger, a daemon's stderr)
// and the test itself can share.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
