package stream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coder/websocket"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/internal/otelx"
)

// maxBatch is how many events a connection takes from memory or the store at
// a time.
const maxBatch = 64

// writeLoop sends c the events after its seq, in order, no more than its window
// ahead of its acks, until it must stop. Each turn it takes what the window
// allows (fill), sends it (send), or, with nothing to send, waits for news
// (wait).
func (s *Server) writeLoop(ctx context.Context, name string, ch *channel, c *client) closeReason {
	w := &writer{s: s, name: name, ch: ch, c: c, heartbeat: time.NewTicker(s.cfg.Heartbeat)}
	defer w.stop()
	for {
		batch, r, stop := w.fill(ctx)
		if stop {
			return r
		}
		if len(batch) > 0 {
			if r, stop := w.send(ctx, batch); stop {
				return r
			}
			continue
		}
		if r, stop := w.wait(ctx); stop {
			return r
		}
	}
}

// writer is the state of one connection's write loop.
type writer struct {
	s         *Server
	name      string
	ch        *channel
	c         *client
	heartbeat *time.Ticker
	full      *time.Timer // running while the window is full
	inflight  uint64      // events sent and not acked, as of the last fill
}

func (w *writer) stop() {
	w.heartbeat.Stop()
	if w.full != nil {
		w.full.Stop()
	}
}

// fill returns the next events the client's window has room for: from the
// channel's tail in memory, else from the store. A full window returns none
// and starts the timer after which the client is a slow consumer; room again
// stops it.
func (w *writer) fill(ctx context.Context) ([]cached, closeReason, bool) {
	w.c.mu.Lock()
	next, inflight := w.c.sent+1, w.c.sent-min(w.c.acked, w.c.sent)
	w.c.mu.Unlock()
	w.inflight = inflight
	room := w.s.cfg.SendBuffer - int(inflight)
	if room <= 0 {
		if w.full == nil {
			w.full = time.NewTimer(w.s.cfg.WriteTimeout)
		}
		return nil, closeReason{}, false
	}
	if w.full != nil {
		w.full.Stop()
		w.full = nil
	}
	batch, head := w.ch.next(next, min(room, maxBatch))
	if len(batch) > 0 || next > head {
		return batch, closeReason{}, false
	}
	return w.read(ctx, next, min(room, maxBatch))
}

// read takes up to n events from seq next on from the store: those that left
// the channel's tail, or a replay. Events trimmed under the client close the
// connection with 4409, so the client reloads.
func (w *writer) read(ctx context.Context, next uint64, n int) ([]cached, closeReason, bool) {
	events, err := w.s.store.Read(ctx, w.name, next-1, n)
	if errors.Is(err, ErrTrimmed) {
		_ = write(ctx, w.c.ws, frame{Type: "error", Code: "trimmed", Message: fmt.Sprintf("events after seq %d were trimmed: reload the state and start from the head", next-1)})
		return nil, closeReason{"trimmed", CloseTrimmed, "events were trimmed: reload"}, true
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, closeReason{"client_gone", 0, ""}, true
		}
		w.s.cfg.Logger.Warn("stream: read failed", "channel", w.name, "err", err)
		return nil, closeReason{"store_error", websocket.StatusTryAgainLater, "store unavailable, retry"}, true
	}
	batch := make([]cached, 0, len(events))
	for _, e := range events {
		batch = append(batch, cached{e: e})
	}
	return batch, closeReason{}, false
}

// send writes batch to the client in order, stopping at a kick between two
// frames: a steady flow of events must not delay a kick. A client that asked
// for them (hello "batch") gets several events in one "events" frame, up to
// maxFrameBytes: one write, and one wakeup of the client, instead of one each.
// The batch is one idem.stream.push span, not one per event.
func (w *writer) send(ctx context.Context, batch []cached) (r closeReason, stop bool) {
	n := 0 // events written
	if !w.s.tr.Off() {
		var span trace.Span
		ctx, span = w.s.tr.Start(ctx, otelx.SpanStreamPush, otelx.KindProducer...)
		defer func() { endPush(span, w.name, batch, n, r) }()
	}
	for i := range batch {
		batch[i].encode()
	}
	for n < len(batch) {
		select {
		case <-w.c.kicked:
			return closeReason{"kicked", w.c.code, w.c.reason}, true
		default:
		}
		data, k := batch[n].frame, 1
		if w.c.batch {
			data, k = eventsFrame(batch[n:])
		}
		// sent moves before the write: a fast client may ack the event before
		// the write returns, and that ack must not be refused as bad_ack.
		w.c.mu.Lock()
		w.c.sent = batch[n+k-1].e.Seq
		w.s.m.unacked.Add(float64(k))
		w.c.mu.Unlock()
		if err := writeRaw(ctx, w.c.ws, data, w.s.cfg.WriteTimeout); err != nil {
			return w.s.reasonFor(ctx, w.c, err), true
		}
		w.s.m.sent.Add(float64(k))
		n += k
	}
	return closeReason{}, false
}

// maxFrameBytes bounds an "events" frame; an event larger than that alone goes
// in an "event" frame of its own.
const maxFrameBytes = 256 << 10

// eventsFrame encodes the first events of batch (encoded) in one frame, as many as
// fit in maxFrameBytes and at least one, and returns it with how many it holds. A
// single event gets an "event" frame.
func eventsFrame(batch []cached) ([]byte, int) {
	k, size := 0, len(`{"type":"events","events":[]}`)
	for k < len(batch) && (k == 0 || size+len(batch[k].event)+1 <= maxFrameBytes) {
		size += len(batch[k].event) + 1
		k++
	}
	if k == 1 {
		return batch[0].frame, 1
	}
	data := make([]byte, 0, size)
	data = append(data, `{"type":"events","events":[`...)
	for i := range k {
		if i > 0 {
			data = append(data, ',')
		}
		data = append(data, batch[i].event...)
	}
	return append(data, ']', '}'), k
}

// wait blocks until there may be something to send (an append or an ack woke
// the client), the connection must end (a kick, the client gone, a window full
// for WriteTimeout), or a heartbeat is due.
func (w *writer) wait(ctx context.Context) (closeReason, bool) {
	var timeout <-chan time.Time
	if w.full != nil {
		timeout = w.full.C
	}
	select {
	case <-w.c.wake:
		return closeReason{}, false
	case <-w.c.kicked:
		return closeReason{"kicked", w.c.code, w.c.reason}, true
	case <-ctx.Done():
		return closeReason{"client_gone", 0, ""}, true
	case <-timeout:
		_ = write(ctx, w.c.ws, frame{Type: "error", Code: "slow_consumer",
			Message: fmt.Sprintf("%d events unacknowledged for %v: ack what you process; reconnect to catch up", w.inflight, w.s.cfg.WriteTimeout)})
		return closeReason{"slow_consumer", CloseSlowConsumer, "slow consumer: window full"}, true
	case <-w.heartbeat.C:
		return w.beat(ctx)
	}
}

// beat records the client's latest ack, sends a heartbeat frame with the
// channel's head and pings the client, which must answer within Heartbeat.
func (w *writer) beat(ctx context.Context) (closeReason, bool) {
	w.s.flushAck(ctx, w.name, w.c, true)
	if err := write(ctx, w.c.ws, frame{Type: "heartbeat", Head: ptr(w.ch.head())}); err != nil {
		return w.s.reasonFor(ctx, w.c, err), true
	}
	pctx, cancel := context.WithTimeout(ctx, w.s.cfg.Heartbeat)
	err := w.c.ws.Ping(pctx)
	cancel()
	if err != nil {
		return closeReason{"heartbeat_timeout", websocket.StatusGoingAway, "no answer to ping"}, true
	}
	return closeReason{}, false
}
