package stream

import (
	"context"
	"fmt"
	"time"

	"github.com/coder/websocket"
)

// maxBadFrames is how many bad frames a connection may send (each answered
// with an error frame) before it is closed with 4400.
const maxBadFrames = 16

// readAcks reads the client's frames: acks, and errors for anything else.
func (s *Server) readAcks(ctx context.Context, ws *websocket.Conn, c *client) {
	bad := 0
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			return
		}
		seq, err := parseAck(data)
		code := "bad_frame"
		if err == nil {
			c.mu.Lock()
			if sent := c.sent; seq > sent {
				err, code = fmt.Errorf("ack of seq %d, but only %d was sent", seq, sent), "bad_ack"
			} else if acked := c.acked; seq > acked {
				c.acked = seq
				s.m.unacked.Sub(float64(seq - acked))
			}
			c.mu.Unlock()
		}
		if err != nil {
			if bad++; bad > maxBadFrames {
				c.kick(CloseBadHello, "too many bad frames") // the write loop closes; read on until then
				continue
			}
			_ = write(ctx, ws, frame{Type: "error", Code: code, Message: err.Error()})
			continue
		}
		select {
		case c.wake <- struct{}{}: // the window may have room again
		default:
		}
	}
}

// ackRefresh is how often a connected client's ack row is rewritten even if its
// ack did not move, so that a store's client expiry never drops a live client.
const ackRefresh = 5 * time.Minute

// flushAck records c's latest ack in the store, if it moved (or, with refresh,
// if the row is due for a refresh). Acks only drive trimming, so they are
// written at each heartbeat and at disconnect, not one write per ack frame.
func (s *Server) flushAck(ctx context.Context, channelName string, c *client, refresh bool) {
	c.mu.Lock()
	acked, done, seen := c.acked, c.flushed, c.seen
	c.mu.Unlock()
	if acked <= done && !(refresh && time.Since(seen) > ackRefresh) {
		return
	}
	if err := s.store.Ack(ctx, channelName, c.id, acked); err != nil {
		s.cfg.Logger.Warn("stream: ack not recorded", "channel", channelName, "err", err)
		return
	}
	c.mu.Lock()
	c.flushed = max(c.flushed, acked)
	c.seen = time.Now()
	c.mu.Unlock()
}
