package idemnats_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/idemnats"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestPublishRetriedAtReconnect: a PubAck lost with its connection never comes,
// and nats.go keeps a synchronous request waiting for it. The Sink publishes
// again as soon as the client has reconnected, instead of after the JetStream
// timeout (an hour here: the old Sink held a one-message Publish until the
// test's bound for a hang). A pipelined batch relies on jetstream, which fails
// the futures of a lost connection itself; it is checked the same way.
//
// The "stream" is a responder on the subject that leaves the first request of a
// chosen message unanswered, as a reply lost in the cut would be, and acks the
// rest; the client's connection goes through a proxy the test cuts once that
// request has arrived.
func TestPublishRetriedAtReconnect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		inFlight    int
		n, withheld int // messages published, the one whose first PubAck is lost
	}{
		{"sync", 1, 1, 0},
		{"async", 8, 3, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := holdOne(t, fmt.Sprintf("m%d", tc.withheld), jetstream.WithDefaultTimeout(time.Hour))
			sink := newSink(t, h.js, idemnats.SinkConfig{MaxInFlight: tc.inFlight})
			msgs := make([]idem.Message, tc.n)
			for i := range msgs {
				msgs[i] = idem.Message{ID: fmt.Sprintf("m%d", i), Topic: h.subject, Payload: []byte("x")}
			}
			// A bound for a hang, not a figure: the retry needs a reconnect only.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- sink.Publish(ctx, msgs...) }()
			select {
			case <-h.r.arrived:
			case err := <-done:
				t.Fatalf("Publish returned %v before its withheld PubAck's request arrived", err)
			}
			if err := h.proxy.Cut(0); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("Publish after its PubAck was lost in a connection cut: %v, want nil (published again once reconnected)", err)
			}
			if got := h.r.count(msgs[tc.withheld].ID); got < 2 {
				t.Errorf("message %s sent %d times, want at least 2 (the first PubAck was lost)", msgs[tc.withheld].ID, got)
			}
		})
	}
}

// held is a responder holding back one PubAck (heldResponder) on a subject of its
// own, and a client reaching the server through a proxy.
type held struct {
	r       *heldResponder
	subject string
	proxy   *chaos.Proxy
	js      jetstream.JetStream // the client's, through the proxy
}

// holdOne sets up held for message ID withhold; the client's JetStream context
// takes opts.
func holdOne(t *testing.T, withhold string, opts ...jetstream.JetStreamOpt) held {
	t.Helper()
	direct, _ := connect(t)
	u, err := url.Parse(natsURL())
	if err != nil {
		t.Fatal(err)
	}
	h := held{r: &heldResponder{withhold: withhold, arrived: make(chan struct{})},
		subject: fmt.Sprintf("idemtest.held.%d", time.Now().UnixNano())}
	if h.proxy, err = chaos.NewProxy("nats", u.Host); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.proxy.Close)
	sub, err := direct.Subscribe(h.subject, h.r.answer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := direct.Flush(); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect("nats://"+h.proxy.Addr(), nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if h.js, err = jetstream.New(nc, opts...); err != nil {
		t.Fatal(err)
	}
	return h
}

// heldResponder answers JetStream publishes as a stream would, except the first
// request of message withhold, which it leaves unanswered (closing arrived).
type heldResponder struct {
	withhold string
	arrived  chan struct{}
	mu       sync.Mutex
	seq      int
	seen     map[string]int
}

func (r *heldResponder) answer(m *nats.Msg) {
	id := m.Header.Get(jetstream.MsgIDHeader)
	r.mu.Lock()
	if r.seen == nil {
		r.seen = map[string]int{}
	}
	r.seen[id]++
	first := r.seen[id] == 1
	r.seq++
	seq := r.seq
	r.mu.Unlock()
	if id == r.withhold && first {
		close(r.arrived)
		return
	}
	_ = m.Respond([]byte(fmt.Sprintf(`{"stream":"HELD","seq":%d}`, seq)))
}

func (r *heldResponder) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[id]
}

// TestPublishOneCutOff: PublishOne does not retry (a retry would call its own
// message a duplicate), so a PubAck lost with its connection is a retryable error
// at once; the old one waited for the caller's deadline (the test's bound for a
// hang here). The caller's retry is then answered.
func TestPublishOneCutOff(t *testing.T) {
	t.Parallel()
	h := holdOne(t, "m0")
	sink := newSink(t, h.js, idemnats.SinkConfig{})
	m := idem.Message{ID: "m0", Topic: h.subject, Payload: []byte("x")}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := sink.PublishOne(ctx, m)
		done <- err
	}()
	<-h.r.arrived
	if err := h.proxy.Cut(0); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, nats.ErrDisconnected) || !idem.IsRetryable(err) {
		t.Fatalf("PublishOne whose PubAck was lost in a connection cut = %v, want a retryable error wrapping nats.ErrDisconnected", err)
	}
	if _, err := sink.PublishOne(ctx, m); err != nil {
		t.Fatalf("PublishOne again after the reconnect: %v", err)
	}
}
