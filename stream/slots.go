package stream

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/coder/websocket"
)

// slots bounds the sockets a Server holds, in two pools and per principal:
//
//   - pending: sockets past the WebSocket handshake whose hello has not been
//     authorized yet (anyone can open one, no credential needed), at most
//     maxPending. One more evicts the oldest, so sockets that never say hello
//     cannot keep a caller who does out: each is closed, at the latest, when
//     maxPending newer handshakes arrived or HandshakeTimeout passed.
//   - admitted: sockets authorized for a channel, at most maxConns, and at most
//     maxPerPrincipal of one principal (ServerConfig.Principal), so one user
//     cannot hold every slot.
//
// A bound of 0 or less is no bound.
type slots struct {
	maxPending, maxConns, maxPerPrincipal int

	mu          sync.Mutex
	pending     *list.List // of context.CancelCauseFunc, the oldest first
	admitted    int
	byPrincipal map[string]int
	onPending   func(delta int) // reports each change of len(pending), under mu
}

// errEvicted ends the hello wait of a pending socket evicted by a newer one.
var errEvicted = errors.New("stream: too many connections waiting for their hello")

func newSlots(maxPending, maxConns, maxPerPrincipal int, onPending func(int)) *slots {
	return &slots{maxPending: maxPending, maxConns: maxConns, maxPerPrincipal: maxPerPrincipal,
		pending: list.New(), byPrincipal: map[string]int{}, onPending: onPending}
}

// full reports whether every admitted slot is taken: a handshake would only be
// refused after its hello, so it is refused at once (503).
func (s *slots) full() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxConns > 0 && s.admitted >= s.maxConns
}

// wait takes a pending slot for a socket whose hello wait ends with cancel,
// evicting the oldest pending socket (cancel(errEvicted)) when the pool is full.
// Pass what it returns to done.
func (s *slots) wait(cancel context.CancelCauseFunc) *list.Element {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.maxPending > 0 && s.pending.Len() >= s.maxPending {
		oldest := s.pending.Front()
		oldest.Value.(context.CancelCauseFunc)(errEvicted)
		s.pending.Remove(oldest)
		s.onPending(-1)
	}
	s.onPending(1)
	return s.pending.PushBack(cancel)
}

// done gives back the pending slot e (once its socket was admitted or refused). It
// reports false if the socket was evicted meanwhile: its slot is free already.
func (s *slots) done(e *list.Element) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.pending.Len()
	if s.pending.Remove(e); s.pending.Len() == n { // a no-op for an evicted socket's
		return false
	}
	s.onPending(-1)
	return true
}

// evictAll ends the hello wait of every pending socket with cause (Server.Close).
func (s *slots) evictAll(cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for e := s.pending.Front(); e != nil; e = e.Next() {
		e.Value.(context.CancelCauseFunc)(cause)
	}
}

// refusal is why a socket is not admitted: the error frame's code and message,
// and the close status.
type refusal struct {
	code   string
	status websocket.StatusCode
	msg    string
}

// admit takes an admitted slot for an authorized socket of principal ("" for
// none), or says why it cannot. release gives it back.
func (s *slots) admit(principal string) (release func(), _ *refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.maxConns > 0 && s.admitted >= s.maxConns {
		return nil, &refusal{"unavailable", websocket.StatusTryAgainLater, fmt.Sprintf("the server holds its maximum of %d connections: retry later", s.maxConns)}
	}
	capped := principal != "" && s.maxPerPrincipal > 0
	if capped && s.byPrincipal[principal] >= s.maxPerPrincipal {
		return nil, &refusal{"too_many_connections", CloseTooMany,
			fmt.Sprintf("you hold the maximum of %d connections: close one (another tab or device) first", s.maxPerPrincipal)}
	}
	s.admitted++
	if capped {
		s.byPrincipal[principal]++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.admitted--
			if capped {
				if s.byPrincipal[principal]--; s.byPrincipal[principal] == 0 {
					delete(s.byPrincipal, principal)
				}
			}
		})
	}, nil
}
