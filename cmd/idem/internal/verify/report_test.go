package verify

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/idemhq/idem/chaos"
)

// TestDeliveriesPerOrder: the broker → consumer row's attempts, less the injected
// duplicates, over its distinct messages, in the JSON report and the table; 0
// without that row.
func TestDeliveriesPerOrder(t *testing.T) {
	r := &Report{Rows: []Row{
		{Boundary: BoundaryHTTP, Attempts: 500, DuplicatesDelivered: 400},
		{Boundary: BoundaryInbox, Attempts: 1300, DuplicatesDelivered: 300},
	}, Faults: map[string]int{chaos.FaultDuplicateDelivery: 100}}
	if got := r.DeliveriesPerOrder(); got != 1.2 { // (1300 - 100 injected) / 1000
		t.Fatalf("DeliveriesPerOrder = %v, want 1.2", got)
	}
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var out struct {
		D float64 `json:"deliveries_per_order"`
	}
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil || out.D != 1.2 {
		t.Fatalf("JSON deliveries_per_order = %v (%v), want 1.2 in %s", out.D, err, buf.String())
	}
	buf.Reset()
	if err := r.WriteTable(&buf); err != nil || !bytes.Contains(buf.Bytes(), []byte("1.20 broker deliveries per order")) {
		t.Fatalf("table lacks the figure (%v):\n%s", err, buf.String())
	}
	if got := (&Report{Rows: []Row{{Boundary: BoundaryHTTP, Attempts: 3}}}).DeliveriesPerOrder(); got != 0 {
		t.Fatalf("without a consumer row: %v, want 0", got)
	}
}

// TestQueueReport: a --broker db: report counts the queue consumer row's claims
// per message, writes the queue's figures and the lost-ack legend, and says why
// the audit did not run.
func TestQueueReport(t *testing.T) {
	r := &Report{Rows: []Row{
		{Boundary: BoundaryHTTP, Attempts: 500, DuplicatesDelivered: 400},
		{Boundary: BoundaryQueue, Attempts: 1000, EffectsApplied: 1000},
		{Boundary: BoundaryQueueConsumer, Attempts: 1250, DuplicatesDelivered: 250},
	}, Faults: map[string]int{},
		Queue: &QueueStats{Claims: 1250, Redeliveries: 250, Takeovers: 200, LeaseLost: 3, Outcomes: map[string]int{"applied": 990, "dead": 10}},
		Audit: &Audit{Skipped: "no outbox"}}
	if got := r.DeliveriesPerOrder(); got != 1.25 {
		t.Fatalf("DeliveriesPerOrder = %v, want 1.25", got)
	}
	var buf bytes.Buffer
	if err := r.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1.25 claims per order", "1250 claims, 250 redeliveries (200 lease takeovers", "3 transactions refused at retirement for a lost lease",
		"applied 990, dead 10", "no ack_lost fault", BoundaryAudit + ": not run: no outbox"} {
		if !bytes.Contains(buf.Bytes(), []byte(want)) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
}

// ackWaitBroker is a Broker of which the tests below need only AckWait.
type ackWaitBroker struct {
	Broker
	wait time.Duration
}

func (b ackWaitBroker) AckWait() time.Duration { return b.wait }

// The audit's default grace outlasts the broker's redelivery wait: a delivery held
// by a paused consumer (20 s on Pub/Sub) is not yet missing, so it is not
// republished (Pub/Sub, with no duplicate window, delivered every such copy). A
// grace given is kept.
func TestAuditGraceFollowsTheBroker(t *testing.T) {
	for _, tc := range []struct{ ackWait, given, want time.Duration }{
		{20 * time.Second, 0, DefaultAuditGrace + 20*time.Second},
		{time.Second, 0, DefaultAuditGrace + time.Second},
		{20 * time.Second, 3 * time.Second, 3 * time.Second},
	} {
		f := &Flow{Broker: ackWaitBroker{wait: tc.ackWait}, AuditGrace: tc.given}
		f.defaults()
		if f.AuditGrace != tc.want {
			t.Errorf("AckWait %v, AuditGrace %v: defaults gave %v, want %v", tc.ackWait, tc.given, f.AuditGrace, tc.want)
		}
	}
}
