package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/coder/websocket"
)

// writeLoop sends c the events after its seq, in order, no more than its window
// ahead of its acks, until it must stop.
func (s *Server) writeLoop(ctx context.Context, name string, ch *channel, c *client) closeReason {
	heartbeat := time.NewTicker(s.cfg.Heartbeat)
	defer heartbeat.Stop()
	var full *time.Timer // running while the window is full
	defer func() {
		if full != nil {
			full.Stop()
		}
	}()
	for {
		c.mu.Lock()
		next, inflight := c.sent+1, c.sent-min(c.acked, c.sent)
		c.mu.Unlock()
		room := s.cfg.SendBuffer - int(inflight)
		var batch []cached
		var head uint64
		if room > 0 {
			if full != nil {
				full.Stop()
				full = nil
			}
			batch, head = ch.next(next, min(room, 64))
			if len(batch) == 0 && next <= head {
				events, err := s.store.Read(ctx, name, next-1, min(room, 64))
				for _, e := range events {
					batch = append(batch, cached{e: e})
				}
				if errors.Is(err, ErrTrimmed) {
					_ = write(ctx, c.ws, frame{Type: "error", Code: "trimmed", Message: fmt.Sprintf("events after seq %d were trimmed: reload the state and start from the head", next-1)})
					return closeReason{"trimmed", CloseTrimmed, "events were trimmed: reload"}
				}
				if err != nil {
					if ctx.Err() != nil {
						return closeReason{"client_gone", 0, ""}
					}
					s.cfg.Logger.Warn("stream: read failed", "channel", name, "err", err)
					return closeReason{"store_error", websocket.StatusTryAgainLater, "store unavailable, retry"}
				}
			}
		} else if full == nil {
			full = time.NewTimer(s.cfg.WriteTimeout)
		}
		for i := range batch {
			select {
			case <-c.kicked: // a steady flow of events must not delay a kick
				return closeReason{"kicked", c.code, c.reason}
			default:
			}
			data := batch[i].frame
			if data == nil {
				data, _ = json.Marshal(frame{Type: "event", Event: &batch[i].e})
			}
			// sent moves before the write: a fast client may ack the event before
			// the write returns, and that ack must not be refused as bad_ack.
			c.mu.Lock()
			c.sent = batch[i].e.Seq
			s.m.unacked.Inc()
			c.mu.Unlock()
			if err := writeRaw(ctx, c.ws, data, s.cfg.WriteTimeout); err != nil {
				return s.reasonFor(ctx, c, err)
			}
			s.m.sent.Inc()
		}
		if len(batch) > 0 {
			continue
		}
		var timeout <-chan time.Time
		if full != nil {
			timeout = full.C
		}
		select {
		case <-c.wake:
		case <-c.kicked:
			return closeReason{"kicked", c.code, c.reason}
		case <-ctx.Done():
			return closeReason{"client_gone", 0, ""}
		case <-timeout:
			_ = write(ctx, c.ws, frame{Type: "error", Code: "slow_consumer",
				Message: fmt.Sprintf("%d events unacknowledged for %v: ack what you process; reconnect to catch up", inflight, s.cfg.WriteTimeout)})
			return closeReason{"slow_consumer", CloseSlowConsumer, "slow consumer: window full"}
		case <-heartbeat.C:
			s.flushAck(ctx, name, c, true)
			if err := write(ctx, c.ws, frame{Type: "heartbeat", Head: ptr(ch.head())}); err != nil {
				return s.reasonFor(ctx, c, err)
			}
			pctx, cancel := context.WithTimeout(ctx, s.cfg.Heartbeat)
			err := c.ws.Ping(pctx)
			cancel()
			if err != nil {
				return closeReason{"heartbeat_timeout", websocket.StatusGoingAway, "no answer to ping"}
			}
		}
	}
}
