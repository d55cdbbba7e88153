package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/idemhq/idem"
)

// faults are the demo's faults (Config.DemoFaults). When on, they lose
//
//   - the consumer's first ack, so that JetStream redelivers a message the inbox
//     has applied;
//   - the payment API's first response, so that the payment client retries a
//     charge the provider has made;
//   - the payment worker's second record of a charge, as if it had died between
//     the charge and the record, so that the next round asks the fence again.
//
// They also count what the consumer received and the worker tried, for the
// demo's report. Off, they change nothing.
type faults struct {
	on      bool
	ackWait time.Duration // JetStream's: when a lost ack's message comes back

	mu           sync.Mutex
	ackLost      string         // the order whose ack was lost
	responseLost string         // the order whose charge response was lost
	recordLost   string         // the order whose record of its charge was lost
	records      int            // records of charges tried
	deliveries   map[string]int // order → deliveries the consumer received
	acks         map[string]int // order → acks that reached the broker
	attempts     map[string]int // order → charges the worker tried (fence.Do calls)
}

// source wraps the consumer's source.
func (f *faults) source(src idem.Source) idem.Source {
	if !f.on {
		return src
	}
	f.deliveries, f.acks, f.attempts = map[string]int{}, map[string]int{}, map[string]int{}
	return &lossySource{Source: src, f: f}
}

// attempt counts a charge of order the worker tries.
func (f *faults) attempt(order string) {
	if !f.on {
		return
	}
	f.mu.Lock()
	f.attempts[order]++
	f.mu.Unlock()
}

// errRecordLost is the error of the lost record of a charge.
var errRecordLost = errors.New("demo fault: the worker stopped between the charge and its record")

// loseRecord reports whether the worker's record of order's charge is to be lost.
func (f *faults) loseRecord(order string) bool {
	if !f.on {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.records++
	if f.records != 2 { // the second: the first is the order whose response was lost
		return false
	}
	f.recordLost = order
	return true
}

// transport wraps the payment client's transport.
func (f *faults) transport(base http.RoundTripper) http.RoundTripper {
	if !f.on {
		return base
	}
	return &lossyTransport{base: base, f: f}
}

// counts returns the deliveries of order the consumer received, the acks of it
// that reached the broker and the charges of it the worker tried.
func (f *faults) counts(order string) (deliveries, acks, attempts int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deliveries[order], f.acks[order], f.attempts[order]
}

// lost returns the orders the faults hit so far ("" for a fault not yet made).
func (f *faults) lost() (ack, response, record string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ackLost, f.responseLost, f.recordLost
}

type lossySource struct {
	idem.Source
	f *faults
}

func (s *lossySource) Receive(ctx context.Context, max int) ([]idem.Delivery, error) {
	ds, err := s.Source.Receive(ctx, max)
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	for i := range ds {
		id := ds[i].ID
		s.f.deliveries[id]++
		lose := s.f.ackLost == ""
		if lose {
			s.f.ackLost = id
		}
		ds[i].Settler = &lossySettler{Settler: ds[i].Settler, f: s.f, order: id, lose: lose}
	}
	return ds, err
}

// lossySettler loses the ack of the delivery it was made to lose: the broker
// never hears of it and delivers the message again after its ack wait. The loss
// is a Nak of that wait, since the source, which keeps a delivery from redelivery
// until its first settle, would keep one that was never settled.
type lossySettler struct {
	idem.Settler
	f     *faults
	order string
	lose  bool
}

func (s *lossySettler) Ack(ctx context.Context) error {
	if s.lose {
		_ = s.Settler.Nak(ctx, s.f.ackWait)
		return nil
	}
	err := s.Settler.Ack(ctx)
	if err == nil {
		s.f.mu.Lock()
		s.f.acks[s.order]++
		s.f.mu.Unlock()
	}
	return err
}

func (s *lossySettler) Nak(ctx context.Context, delay time.Duration) error {
	return s.Settler.Nak(ctx, delay)
}

// errResponseLost is the error of the charge whose response was lost.
var errResponseLost = errors.New("demo fault: the connection broke before the payment API's response arrived")

type lossyTransport struct {
	base http.RoundTripper
	f    *faults
}

func (t *lossyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	order := chargedOrder(req)
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	t.f.mu.Lock()
	lose := t.f.responseLost == ""
	if lose {
		t.f.responseLost = order
	}
	t.f.mu.Unlock()
	if !lose {
		return resp, nil
	}
	// The provider has charged; the client never learns it.
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil, errResponseLost
}

// chargedOrder reads the order a charge request is for.
func chargedOrder(req *http.Request) string {
	if req.GetBody == nil {
		return ""
	}
	body, err := req.GetBody()
	if err != nil {
		return ""
	}
	defer body.Close()
	var in chargeRequest
	_ = json.NewDecoder(io.LimitReader(body, 1<<16)).Decode(&in)
	return in.OrderID
}
