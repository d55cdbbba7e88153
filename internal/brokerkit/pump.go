package brokerkit

import (
	"context"
	"sync"

	"github.com/idemhq/idem"
)

// Pump is the buffer between a pulling source's requests to its broker and its
// Receive calls (idemnats's Fetch, idempubsub's Pull): a pull runs in the
// background and appends what it brings to Buf, so Receive can hand out the first
// messages at once and keep the rest for the next call; Receive hands out from
// Buf, reports a failed pull once, starts a pull when none is outstanding, and
// waits for the next change. Mu guards every field, and the source keeps the state
// its pulls share with Receive under it too. The zero value is ready.
type Pump[M any] struct {
	Mu      sync.Mutex
	Closed  bool
	Buf     []M   // pulled and not yet handed out, in the broker's order
	Pulling bool  // a pull is outstanding
	Err     error // the last pull's failure, for the next Receive to report
	changed chan struct{}
}

// Receive waits until next has something for the caller. Under Mu, after refusing
// a closed pump (idem.ErrClosed) and an ended ctx (its error), it calls next,
// which takes the messages to hand out (Take), or the error to report (Failed),
// and may start a pull; when next has neither, Receive waits for a Broadcast or
// the end of ctx and asks again.
func (p *Pump[M]) Receive(ctx context.Context, next func() ([]M, error)) ([]M, error) {
	for {
		p.Mu.Lock()
		if p.Closed {
			p.Mu.Unlock()
			return nil, idem.ErrClosed
		}
		if err := ctx.Err(); err != nil {
			p.Mu.Unlock()
			return nil, err
		}
		msgs, err := next()
		if len(msgs) > 0 || err != nil {
			p.Mu.Unlock()
			return msgs, err
		}
		if p.changed == nil {
			p.changed = make(chan struct{})
		}
		changed := p.changed
		p.Mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Take hands out the first n buffered messages. Mu is held.
func (p *Pump[M]) Take(n int) []M {
	msgs := p.Buf[:n:n]
	p.Buf = p.Buf[n:]
	return msgs
}

// Failed takes the last pull's failure, so that one Receive reports it. Mu is held.
func (p *Pump[M]) Failed() error {
	err := p.Err
	p.Err = nil
	return err
}

// Broadcast wakes every waiting Receive. Mu is held.
func (p *Pump[M]) Broadcast() {
	if p.changed != nil {
		close(p.changed)
		p.changed = nil
	}
}

// Close marks the pump closed, once (CloseOnce), wakes every waiting Receive and
// returns the buffered messages for the source to give back; detach runs under Mu
// with them, for the source's own state. A second Close returns nil and false.
func (p *Pump[M]) Close(detach func(buf []M)) (buf []M, first bool) {
	first = CloseOnce(&p.Mu, &p.Closed, func() {
		buf, p.Buf = p.Buf, nil
		if detach != nil {
			detach(buf)
		}
		p.Broadcast()
	})
	return buf, first
}
