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

// faults are the demo's network faults (Config.DemoFaults). When on, they lose
// the consumer's first ack, so that JetStream redelivers a message the inbox has
// applied, and the payment API's first response, so that the payment client
// retries a charge the provider has made. They also count what the consumer
// received, for the demo's report. Off, they change nothing.
type faults struct {
	on bool

	mu           sync.Mutex
	ackLost      string         // the order whose ack was lost
	responseLost string         // the order whose charge response was lost
	deliveries   map[string]int // order → deliveries the consumer received
	acks         map[string]int // order → acks that reached the broker
}

// source wraps the consumer's source.
func (f *faults) source(src idem.Source) idem.Source {
	if !f.on {
		return src
	}
	f.deliveries, f.acks = map[string]int{}, map[string]int{}
	return &lossySource{Source: src, f: f}
}

// transport wraps the payment client's transport.
func (f *faults) transport(base http.RoundTripper) http.RoundTripper {
	if !f.on {
		return base
	}
	return &lossyTransport{base: base, f: f}
}

// counts returns the deliveries of order the consumer received and the acks of
// it that reached the broker.
func (f *faults) counts(order string) (deliveries, acks int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deliveries[order], f.acks[order]
}

// lost returns the orders the faults hit so far ("" for a fault not yet made).
func (f *faults) lost() (ack, response string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ackLost, f.responseLost
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
// never hears of it and delivers the message again after its ack wait.
type lossySettler struct {
	idem.Settler
	f     *faults
	order string
	lose  bool
}

func (s *lossySettler) Ack(ctx context.Context) error {
	if s.lose {
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
