package idemkafka_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkafka"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRebalanceMidBatch: consumer A holds a batch of 100 records, half of it
// acknowledged, when consumer B joins the group. Every record must still be
// acknowledged by someone, and the records A acknowledged before the rebalance
// (a contiguous prefix of each partition, so their offsets are committed when A
// gives partitions up) must not be delivered again. It runs with the cooperative
// balancer (A keeps some partitions and its deliveries on them stay valid) and an
// eager one (A gives up everything and gets its share back from the commits).
func TestRebalanceMidBatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		balancer kgo.GroupBalancer
	}{
		{"cooperative-sticky", kgo.CooperativeStickyBalancer()},
		{"eager-range", kgo.RangeBalancer()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testRebalanceMidBatch(t, kgo.Balancers(tc.balancer))
		})
	}
}

func testRebalanceMidBatch(t *testing.T, balancer kgo.Opt) {
	const n = 100
	f := setup(t, 4)
	f.publish(t, f.msgs(n, 16)...)
	a := f.source(t, balancer)
	batch := receiveN(t, a, n)

	// A acknowledges the first half of each partition's records and holds the rest.
	byPartition := make(map[int32][]idem.Delivery)
	for _, d := range batch {
		_, p, _, ok := idemkafka.Offset(d)
		if !ok {
			t.Fatalf("Offset(%s) not ok", d.ID)
		}
		byPartition[p] = append(byPartition[p], d)
	}
	ackedBefore := make(map[string]bool)
	var held []idem.Delivery
	for _, ds := range byPartition {
		half := len(ds) / 2
		ack(t, ds[:half]...)
		for _, d := range ds[:half] {
			ackedBefore[d.ID] = true
		}
		held = append(held, ds[half:]...)
	}

	ca := startConsumer("A", a)
	b := f.source(t, balancer)
	cb := startConsumer("B", b)
	testsvc.Eventually(t, 30*time.Second, "B receives records after joining", func() bool {
		received, _, _ := cb.snapshot()
		return len(received) > 0
	})

	// B owns partitions now, so the rebalance has happened: A's held deliveries of
	// partitions it kept are acknowledged, those of partitions it gave up are refused.
	ackedHeld := make(map[string]bool)
	revoked := 0
	for _, d := range held {
		switch err := d.Settler.Ack(context.Background()); {
		case err == nil:
			ackedHeld[d.ID] = true
		case errors.Is(err, idemkafka.ErrRevoked):
			revoked++
		default:
			t.Fatalf("A: Ack %s after the rebalance: %v", d.ID, err)
		}
	}
	if revoked == 0 {
		t.Fatal("B owns a partition, yet none of A's held deliveries was revoked")
	}

	all := func() map[string]bool {
		union := make(map[string]bool, n)
		for _, m := range []map[string]bool{ackedBefore, ackedHeld} {
			for id := range m {
				union[id] = true
			}
		}
		for _, c := range []*consumer{ca, cb} {
			_, acked, _ := c.snapshot()
			for id := range acked {
				union[id] = true
			}
		}
		return union
	}
	testsvc.Eventually(t, 30*time.Second, "every record is acknowledged", func() bool { return len(all()) == n })
	ca.stop()
	cb.stop()

	for _, c := range []*consumer{ca, cb} {
		received, _, errs := c.snapshot()
		for _, err := range errs {
			t.Error(err)
		}
		for _, id := range received {
			if ackedBefore[id] {
				t.Errorf("%s received %s again, acknowledged (and committed) before the rebalance", c.name, id)
			}
		}
		t.Logf("%s received %d records after the rebalance", c.name, len(received))
	}
	t.Logf("A held %d unacknowledged records at the rebalance; %d were revoked and redelivered", len(held), revoked)

	// Everything acknowledged is committed once both leave: a new member gets nothing.
	a.Close()
	b.Close()
	if extra := receive(t, f.source(t), 1, 3*time.Second); len(extra) != 0 {
		t.Fatalf("after every record was acknowledged, a new member received %s (%s)", extra[0].ID, extra[0].Position)
	}
}
