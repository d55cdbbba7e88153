package idemnats

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// A request whose connection drops is never answered, yet nats.go keeps it
// waiting for its reply until its context ends: on a lost connection it clears
// the pending flushes, not the pending requests (processOpErr), and the server
// sent the reply, if any, on the connection that is gone. So a synchronous
// PubAck or an ack's confirmation in flight at a broker blip held its caller for
// the whole JetStream timeout (5 s by default; a quarter of AckWait for an ack)
// before the retry, which the reconnected client could have answered at once.
// connWatch tells such a request that its connection was lost, as jetstream
// tells its asynchronous publishes (their futures fail with ErrDisconnected when
// the connection reconnects: resetPendingAcksOnReconnect).

// connWatch follows one connection's losses. It is shared by every Sink and
// Source on the connection (watchConn).
type connWatch struct {
	mu     sync.Mutex
	epoch  context.Context // canceled when the connection is next lost
	cancel context.CancelFunc
}

// watches holds the connWatch of each connection in use, until it closes.
var watches sync.Map // *nats.Conn → *connWatch

// watchConn returns nc's connWatch, starting it on first use. Its goroutine ends
// when nc closes.
func watchConn(nc *nats.Conn) *connWatch {
	if w, ok := watches.Load(nc); ok {
		return w.(*connWatch)
	}
	w := &connWatch{}
	w.epoch, w.cancel = context.WithCancel(context.Background())
	if prev, loaded := watches.LoadOrStore(nc, w); loaded {
		w.cancel()
		return prev.(*connWatch)
	}
	ch := nc.StatusChanged(nats.RECONNECTING, nats.DISCONNECTED, nats.CLOSED)
	go w.follow(nc, ch)
	return w
}

// follow ends the epoch at each loss of nc, until nc closes.
func (w *connWatch) follow(nc *nats.Conn, ch chan nats.Status) {
	defer func() {
		nc.RemoveStatusListener(ch)
		watches.Delete(nc)
		w.mu.Lock()
		w.cancel() // a closed connection answers nothing more
		w.mu.Unlock()
	}()
	if nc.IsClosed() { // closed before the listener was registered
		return
	}
	for s := range ch {
		w.mu.Lock()
		w.cancel()
		if s != nats.CLOSED {
			w.epoch, w.cancel = context.WithCancel(context.Background())
		}
		w.mu.Unlock()
		if s == nats.CLOSED {
			return
		}
	}
}

// current returns a context canceled when the connection is next lost: taken
// before a request is sent, it ends if that request's connection is lost. (A
// request sent while the client reconnects waits in its buffer and goes out on
// the new connection, whose reply comes.)
func (w *connWatch) current() context.Context {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.epoch
}

// request runs req with a context that ends after timeout, with ctx, or when
// the connection is lost after the call starts. A request cut short by the loss
// (req returned its context's cancellation) returns nats.ErrDisconnected, which
// transient retries; any other outcome is req's.
func (w *connWatch) request(ctx context.Context, timeout time.Duration, req func(ctx context.Context) error) error {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stop := context.AfterFunc(w.current(), cancel)
	err := req(rctx)
	if lost := !stop(); lost && errors.Is(err, context.Canceled) && ctx.Err() == nil {
		return fmt.Errorf("%w (the connection was lost while waiting for the reply)", nats.ErrDisconnected)
	}
	return err
}
