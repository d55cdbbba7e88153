package chaos

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
)

// A First fault hits first attempts only; on later attempts the other faults keep
// their rate and the First one's share goes to no fault.
func TestInjectorFirst(t *testing.T) {
	t.Parallel()
	faults := []Fault{{Kind: "any", Weight: 1}, {Kind: "first", Weight: 1, First: true}}
	in := NewInjector(11, 1)
	for i := range 2000 {
		in.Roll(fmt.Sprint("op-", i), 1, faults)
	}
	if c := in.Counts(); c["first"] < 900 || c["any"] < 900 {
		t.Fatalf("first attempts: counts %v, want each kind about half of 2000", c)
	}
	later := NewInjector(11, 1)
	for i := range 2000 {
		later.Roll(fmt.Sprint("op-", i), 2+i%3, faults)
	}
	if c := later.Counts(); c["first"] != 0 || c["any"] < 900 || c["any"] > 1100 {
		t.Fatalf("later attempts: counts %v, want no first and any about half of 2000", c)
	}
	if later.Faulted() != later.Counts()["any"] {
		t.Fatalf("faulted %d, want only the any faults (%v)", later.Faulted(), later.Counts())
	}
}

// fakeSource hands out its deliveries once, each with a recording settler.
type fakeSource struct{ ds []idem.Delivery }

func (f *fakeSource) Receive(context.Context, int) ([]idem.Delivery, error) {
	ds := f.ds
	f.ds = nil
	return ds, nil
}
func (f *fakeSource) Close() error { return nil }

type recorder struct {
	mu   sync.Mutex
	acks int
	naks []time.Duration
}

func (r *recorder) Ack(context.Context) error { r.mu.Lock(); defer r.mu.Unlock(); r.acks++; return nil }
func (r *recorder) Nak(_ context.Context, d time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.naks = append(r.naks, d)
	return nil
}

func deliveries(rec *recorder, attempts ...int) []idem.Delivery {
	var ds []idem.Delivery
	for i, a := range attempts {
		ds = append(ds, idem.Delivery{Message: idem.Message{ID: fmt.Sprint("m-", i)}, Attempt: a, Settler: rec})
	}
	return ds
}

// On a source that keeps its unsettled deliveries until its channel closes
// (KeepsUnsettled: AMQP), a lost ack is a Nak of AckWait; elsewhere (a broker
// with an ack wait of its own) it is nothing at all.
func TestSourceLostAck(t *testing.T) {
	t.Parallel()
	for _, keeps := range []bool{false, true} {
		rec := &recorder{}
		s := &Source{Source: &fakeSource{deliveries(rec, 1, 1)}, Injector: NewInjector(1, 1),
			Faults: []Fault{{Kind: FaultLostAck, Weight: 1}}, AckWait: 3 * time.Second, KeepsUnsettled: keeps}
		ds, err := s.Receive(context.Background(), 10)
		if err != nil || len(ds) != 2 {
			t.Fatalf("Receive: %d deliveries, %v", len(ds), err)
		}
		for _, d := range ds {
			if err := d.Settler.Ack(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		want := 0
		if keeps {
			want = 2
		}
		if rec.acks != 0 || len(rec.naks) != want {
			t.Fatalf("KeepsUnsettled %v: %d acks and naks %v reached the broker, want 0 acks and %d naks", keeps, rec.acks, rec.naks, want)
		}
		for _, d := range rec.naks {
			if d != 3*time.Second {
				t.Fatalf("lost ack became a Nak of %v, want the AckWait 3s", d)
			}
		}
	}
}

// Firsts counts the deliveries the broker numbered first, not its redeliveries
// and not the injected duplicates; Tally counts them all.
func TestSourceFirsts(t *testing.T) {
	t.Parallel()
	var tally, firsts Tally
	rec := &recorder{}
	s := &Source{Source: &fakeSource{deliveries(rec, 1, 2, 1, 0)}, Injector: NewInjector(1, 1),
		Faults: []Fault{{Kind: FaultDuplicateDelivery, Weight: 1}}, Tally: &tally, Firsts: &firsts}
	ds, err := s.Receive(context.Background(), 10)
	if err != nil || len(ds) != 8 {
		t.Fatalf("Receive: %d deliveries (want 4, each duplicated), %v", len(ds), err)
	}
	if tally.Total() != 8 || firsts.Total() != 2 || firsts.Distinct() != 2 {
		t.Fatalf("tally %d, firsts %d (%d distinct); want 8, 2 and 2", tally.Total(), firsts.Total(), firsts.Distinct())
	}
}

type nopSink struct{ n int }

func (s *nopSink) Publish(_ context.Context, msgs ...idem.Message) error {
	s.n += len(msgs)
	return nil
}

// Sent counts what reached the wrapped sink: a batch an injected publish error
// stopped is in Tally, not in Sent; one a relay crash hit after its publish is in
// both.
func TestSinkSent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fault    string
		wantSent int
	}{{FaultPublishError, 0}, {FaultRelayCrash, 2}} {
		var tally, sent Tally
		inner := &nopSink{}
		s := &Sink{Sink: inner, Injector: NewInjector(1, 1), Faults: []Fault{{Kind: tc.fault, Weight: 1}}, Kill: func() {}, Tally: &tally, Sent: &sent}
		if err := s.Publish(context.Background(), idem.Message{ID: "a"}, idem.Message{ID: "b"}); err == nil {
			t.Fatalf("%s: Publish returned nil, want the injected error", tc.fault)
		}
		if tally.Total() != 2 || sent.Total() != tc.wantSent || inner.n != tc.wantSent {
			t.Fatalf("%s: tally %d, sent %d, published %d; want 2, %d, %d", tc.fault, tally.Total(), sent.Total(), inner.n, tc.wantSent, tc.wantSent)
		}
	}
}
