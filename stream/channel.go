package stream

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"
)

// channel is the live state of one channel with subscribers: the newest events
// (for delivery without a store read), the highest seq known, and the clients.
type channel struct {
	mu      sync.Mutex
	tail    map[uint64]cached
	max     uint64      // the head: every seq up to it is committed and notified, or in the store
	top     uint64      // the highest seq notified, above max while a lower one's Notify is due
	gap     *time.Timer // moves max to top if the gap below top stays open (see Server.Notify)
	clients map[*client]struct{}
}

// wake tells every client of ch to look for events.
func (ch *channel) wake() {
	ch.mu.Lock()
	clients := make([]*client, 0, len(ch.clients))
	for c := range ch.clients {
		clients = append(clients, c)
	}
	ch.mu.Unlock()
	for _, c := range clients {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// cached is an event in a channel's tail with its event frame, encoded once for
// every client.
type cached struct {
	e     Event
	frame []byte // {"type":"event","event":…}
	event []byte // the event alone, for "events" frames
}

// encode fills c's frame and event from c.e, once.
func (c *cached) encode() {
	if c.frame != nil {
		return
	}
	c.event, _ = json.Marshal(&c.e)
	c.frame = make([]byte, 0, len(c.event)+len(`{"type":"event","event":}`))
	c.frame = append(append(append(c.frame, `{"type":"event","event":`...), c.event...), '}')
}

// join registers c on channel, creating its live state from the store's head.
func (s *Server) join(ctx context.Context, name string, c *client) (*channel, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errors.New("server closed")
	}
	ch := s.channels[name]
	if ch == nil {
		ch = &channel{tail: map[uint64]cached{}, clients: map[*client]struct{}{}}
		s.channels[name] = ch
	}
	ch.mu.Lock()
	ch.clients[c] = struct{}{}
	ch.mu.Unlock()
	s.active.Add(1)
	s.mu.Unlock()
	head, err := s.store.Head(ctx, name)
	if err != nil {
		s.leave(name, ch, c)
		s.active.Done()
		return nil, err
	}
	ch.mu.Lock()
	ch.max = max(ch.max, head)
	ch.mu.Unlock()
	return ch, nil
}

func (s *Server) leave(name string, ch *channel, c *client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch.mu.Lock()
	delete(ch.clients, c)
	empty := len(ch.clients) == 0
	ch.mu.Unlock()
	if empty && s.channels[name] == ch {
		delete(s.channels, name)
	}
}

func (ch *channel) head() uint64 {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.max
}

// next returns the events from seq on that are in memory, contiguous, up to n,
// and the highest seq known.
func (ch *channel) next(seq uint64, n int) ([]cached, uint64) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	var out []cached
	for len(out) < n {
		e, ok := ch.tail[seq]
		if !ok {
			break
		}
		out = append(out, e)
		seq++
	}
	return out, ch.max
}
