package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/idemhq/idem"
)

// recordSink records what reached the broker.
type recordSink struct {
	mu  sync.Mutex
	ids []string
}

func (s *recordSink) Publish(_ context.Context, msgs ...idem.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		s.ids = append(s.ids, m.ID)
	}
	return nil
}

// The broker's loss: a seeded fraction of the messages is acknowledged and not
// forwarded, the same ones for the same seed; a lost message's later publishes
// (the relay's own copies) are lost with it until a repair of it is recorded, and
// its repair's copy goes through. Every publish is acknowledged.
func TestLossSink(t *testing.T) {
	ctx := context.Background()
	run := func(seed int64) (*losses, *recordSink, map[string]bool, *int) {
		repaired := map[string]bool{}
		counted := 0
		l := newLosses(0.1, seed, func(_ context.Context, id string) (bool, error) { return repaired[id], nil }, func() { counted++ })
		rec := &recordSink{}
		s := lossSink{rec, l}
		for i := 0; i < 1000; i += 10 { // batches of 10, as a relay publishes
			var batch []idem.Message
			for j := i; j < i+10; j++ {
				batch = append(batch, idem.Message{ID: fmt.Sprintf("m%d", j), Topic: "t"})
			}
			if err := s.Publish(ctx, batch...); err != nil {
				t.Fatalf("publish: %v (a lost message is acknowledged)", err)
			}
		}
		return l, rec, repaired, &counted
	}
	l, rec, repaired, counted := run(7)
	lost := l.ids()
	if len(lost) < 60 || len(lost) > 140 || *counted != len(lost) || l.dropped() != len(lost) || len(rec.ids) != 1000-len(lost) {
		t.Fatalf("lost %d of 1000 at 10%% (counted %d, dropped %d), forwarded %d", len(lost), *counted, l.dropped(), len(rec.ids))
	}
	for _, id := range rec.ids {
		if lost[id] {
			t.Fatalf("lost message %s was forwarded", id)
		}
	}
	if l2, _, _, _ := run(7); fmt.Sprint(l2.ids()) != fmt.Sprint(lost) {
		t.Fatalf("the same seed lost other messages")
	}
	if l3, _, _, _ := run(8); fmt.Sprint(l3.ids()) == fmt.Sprint(lost) {
		t.Fatalf("another seed lost the same messages")
	}

	var one string
	for id := range lost {
		one = id
		break
	}
	s := lossSink{rec, l}
	before := len(rec.ids)
	// The relay publishes it again (a crash before its mark): lost with it.
	if err := s.Publish(ctx, idem.Message{ID: one}, idem.Message{ID: "m0-not-lost"}); err != nil {
		t.Fatal(err)
	}
	if len(rec.ids) != before+1 || rec.ids[before] != "m0-not-lost" || l.dropped() != len(lost)+1 || *counted != len(lost) {
		t.Fatalf("a lost message's copy: forwarded %v, dropped %d, counted %d", rec.ids[before:], l.dropped(), *counted)
	}
	// Once a repair of it is recorded, its copy reaches the broker, and every
	// publish after it.
	repaired[one] = true
	for range 2 {
		if err := s.Publish(ctx, idem.Message{ID: one}); err != nil {
			t.Fatal(err)
		}
	}
	if got := rec.ids[before+1:]; len(got) != 2 || got[0] != one || *counted != len(lost) {
		t.Fatalf("the repair's copy: forwarded %v, counted %d", got, *counted)
	}
	// A failed lookup of the repairs fails the publish: the relay sends the batch again.
	l.repaired = func(context.Context, string) (bool, error) { return false, fmt.Errorf("connection cut") }
	var other string
	for id := range lost {
		if id != one {
			other = id
			break
		}
	}
	if err := s.Publish(ctx, idem.Message{ID: other}); err == nil {
		t.Fatal("a publish whose repair lookup failed succeeded")
	}
}

// The report carries the audit's section, in the table and in JSON, and the
// legend lists the fault and the section.
func TestAuditSection(t *testing.T) {
	r := &Report{Rows: []Row{{Boundary: BoundaryInbox}}, Faults: map[string]int{FaultBrokerLoss: 12}, BrokerLoss: 0.02,
		Audit: &Audit{Repair: true, Runs: 30, Grace: DefaultAuditGrace, Published: 600, Applied: 600, Republished: 13, RepairedLost: 12, Needless: 1,
			Sentence: "orders → ledger: outbox … 600 applied once.\n"}}
	var buf bytes.Buffer
	if err := r.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{BoundaryAudit, "broker_acked_lost", "600 published, 600 applied", "republished 13: 12 message(s) the broker lost, 1 needless", "orders → ledger"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, buf.String())
		}
	}
	buf.Reset()
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var out struct {
		Loss  float64 `json:"broker_loss"`
		Audit struct {
			Republished  int `json:"republished"`
			RepairedLost int `json:"repaired_lost"`
		} `json:"audit"`
	}
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil || out.Loss != 0.02 || out.Audit.Republished != 13 || out.Audit.RepairedLost != 12 {
		t.Fatalf("JSON %+v (%v): %s", out, err, buf.String())
	}
	buf.Reset()
	if err := WriteLegend(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{FaultBrokerLoss, BoundaryAudit} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("the legend lacks %q", want)
		}
	}
}
