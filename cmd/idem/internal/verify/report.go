package verify

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemhq/idem/chaos"
)

// Row is what one boundary delivered and what took effect in the database.
type Row struct {
	Boundary             string `json:"boundary"`
	Attempts             int    `json:"attempts"`              // requests, publishes or deliveries that crossed it
	DuplicatesDelivered  int    `json:"duplicates_delivered"`  // attempts beyond one per cause
	DuplicatesSuppressed int    `json:"duplicates_suppressed"` // duplicates recognised and not applied again
	EffectsApplied       int    `json:"effects_applied"`       // effect rows in the database
	Lost                 int    `json:"lost"`                  // causes with no effect
	DuplicatedEffects    int    `json:"duplicated_effects"`    // effects beyond one per cause, within the retention window
	// LateDuplicates are effects of late requests and messages: repeated after the
	// key's retention window had passed, made by a request that arrived after its
	// deadline while its order was placed again, or by a message applied after its
	// deadline. idem refuses them all (Refused), so with idem they must be 0.
	LateDuplicates int `json:"late_duplicates"`
	// Refused counts the late requests and messages idem refused instead of
	// applying: retries whose key was older than the retention (410), requests
	// past their deadline (412) and deliveries of messages past their deadline
	// (dead-lettered as "deadline"). A copy of one is refused again and counted again.
	Refused int `json:"refused"`
	// BalanceOK, where the boundary keeps a running total, says whether it equals
	// the sum of the effects.
	BalanceOK *bool `json:"balance_ok,omitempty"`
}

// OK reports whether the boundary kept its promise.
func (r Row) OK() bool {
	return r.Lost == 0 && r.DuplicatedEffects == 0 && r.LateDuplicates == 0 && (r.BalanceOK == nil || *r.BalanceOK)
}

// Report is the result of one verification run.
type Report struct {
	Seed        int64          `json:"seed"`
	FaultRate   float64        `json:"fault_rate"`
	Ops         int            `json:"orders"`
	Store       string         `json:"store"`
	Broker      string         `json:"broker"`
	API         string         `json:"api"` // the order API: APIHTTP or APIGRPC
	Pay         string         `json:"pay"` // the payment workers' fence: PayFence, PayKeyed or PayKeyedWriteBehind
	Unsafe      bool           `json:"unsafe"`
	Accepted    int            `json:"accepted"`   // orders the service answered 201
	Unanswered  int            `json:"unanswered"` // orders whose client gave up (may exist at most once)
	Operations  int            `json:"operations"` // requests, publishes and deliveries a fault could hit
	Faulted     int            `json:"faulted"`    // operations a fault hit
	Faults      map[string]int `json:"faults"`     // injected faults by kind
	Rows        []Row          `json:"rows"`
	Balance     int64          `json:"balance"`
	OrderSum    int64          `json:"order_sum"` // of the orders whose event was not refused for its deadline
	DeadLetters int            `json:"dead_letters"`
	// AcksFailed counts the consumers' acks that returned an error (the
	// connection was cut, the consumer was stopping): the broker did not get
	// them and delivers each of those messages again, as after a lost ack. On
	// RabbitMQ a cut fails the ack of every delivery its consumers held.
	AcksFailed int `json:"acks_failed"`
	// RelayCopies counts the messages the relay sent to the broker again
	// (after it was killed between publish and mark, or after a publish that
	// failed once it had left): a broker without a duplicate window (Kafka,
	// Pub/Sub, RabbitMQ) may store and deliver each.
	RelayCopies int `json:"relay_copies"`
	// StoredCopies counts the copies the broker stored and delivered, where it
	// numbers its deliveries (Delivery.Attempt: NATS, RabbitMQ's quorum queues,
	// SQS): the deliveries numbered first beyond one per message. -1 where it
	// does not (Kafka): RelayCopies is then the most there can be.
	StoredCopies int `json:"stored_copies"`
	// Unsettled counts what was still on its way when the flow did not settle within
	// Flow.Timeout: orders unpublished, unapplied, unpaid or unshown, each step once.
	// The "lost" counts include them; a longer timeout tells a slow machine from a
	// loss.
	Unsettled int `json:"unsettled,omitempty"`
	// Pending is Unsettled by step: which step of the flow had not caught up.
	Pending *Pending      `json:"pending,omitempty"`
	Elapsed time.Duration `json:"elapsed_ns"`
	// BrokerLoss is Flow.BrokerLoss: the fraction of messages the broker
	// acknowledged and lost.
	BrokerLoss float64 `json:"broker_loss,omitempty"`
	// Audit is what the run's audit found and republished (nil for a report
	// built without a run).
	Audit *Audit `json:"audit,omitempty"`
	// Queue is what the queue boundary did, with the database as the queue
	// (--broker db:); nil otherwise.
	Queue *QueueStats `json:"queue,omitempty"`
	// DBCrash is what the database server's crashes did (Flow.DBCrash); nil
	// without them.
	DBCrash *DBCrashStats `json:"db_crash,omitempty"`
	// Failover is what a primary failover of the database cost (--failover); nil
	// without one.
	Failover *FailoverReport `json:"failover,omitempty"`
	// Skew is what the nodes' disagreeing clocks did (Flow.Skew); nil without.
	Skew *SkewReport `json:"clock_skew,omitempty"`
}

// OK reports whether every boundary kept its promise.
func (r *Report) OK() bool {
	if r.Unsettled > 0 || (r.DBCrash != nil && !r.DBCrash.ok()) {
		return false
	}
	for _, row := range r.Rows {
		if !row.OK() {
			return false
		}
	}
	return len(r.Rows) > 0
}

// FaultTotal is the number of faults injected.
func (r *Report) FaultTotal() int {
	n := 0
	for _, v := range r.Faults {
		n += v
	}
	return n
}

// DeliveriesPerOrder is how many times, on average, the broker delivered each
// order's message that reached the consumers: the broker → consumer row's
// attempts, less the duplicate deliveries the run injected itself, over its
// distinct messages. 1 means every message was delivered once; what is above
// comes from the broker (redeliveries after a consumer crash, a lost ack or a
// rebalance, and copies an outbox relay published again where the broker keeps
// them all, as Kafka does). With the database as the queue it is the queue
// consumer row's claims per message. 0 when no message was delivered.
func (r *Report) DeliveriesPerOrder() float64 {
	for _, row := range r.Rows {
		if row.Boundary != BoundaryInbox && row.Boundary != BoundaryQueueConsumer {
			continue
		}
		if distinct := row.Attempts - row.DuplicatesDelivered; distinct > 0 {
			broker := row.Attempts - r.Faults[chaos.FaultDuplicateDelivery]
			return math.Round(100*float64(broker)/float64(distinct)) / 100
		}
	}
	return 0
}

// Throughput is orders per second, end to end.
func (r *Report) Throughput() float64 { return float64(r.Ops) / max(r.Elapsed.Seconds(), 1e-9) }

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		*Report
		OK                 bool    `json:"ok"`
		Throughput         float64 `json:"orders_per_second"`
		DeliveriesPerOrder float64 `json:"deliveries_per_order"`
	}{r, r.OK(), r.Throughput(), r.DeliveriesPerOrder()})
}

// WriteTable writes the report for a person: the setup (WriteHeader), then the
// results (WriteResults).
func (r *Report) WriteTable(w io.Writer) error {
	if err := r.WriteHeader(w); err != nil {
		return err
	}
	return r.WriteResults(w)
}

// WriteHeader writes the line that says what runs: orders, store, broker, seed and
// mode. It needs only those fields, so idem verify prints it before the run.
func (r *Report) WriteHeader(w io.Writer) error {
	mode := "exactly-once (idem)"
	if r.Unsafe {
		mode = "UNSAFE: idem's protection off, plain at-least-once (negative control)"
	}
	api := ""
	if r.API == APIGRPC {
		api = ", orders over gRPC"
	}
	switch r.Pay {
	case PayKeyed:
		api += ", keyed payments"
	case PayKeyedWriteBehind:
		api += ", keyed payments (write-behind)"
	}
	_, err := fmt.Fprintf(w, "idem verify: %d orders%s, %s + %s, seed %d, %s\n", r.Ops, api, r.Store, r.Broker, r.Seed, mode)
	return err
}

// WriteResults writes what the run found: the faults, one row per boundary under
// the headers of Columns, the notes and the verdict.
func (r *Report) WriteResults(w io.Writer) error {
	pct := 0.0
	if r.Operations > 0 {
		pct = 100 * float64(r.Faulted) / float64(r.Operations)
	}
	fmt.Fprintf(w, "faults: %d of %d operations hit (%.1f%%, --fault-rate %g); %d injected in all:\n",
		r.Faulted, r.Operations, pct, r.FaultRate, r.FaultTotal())
	for _, k := range slices.Sorted(maps.Keys(r.Faults)) {
		fmt.Fprintf(w, "  %-32s %d\n", k, r.Faults[k])
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, c := range Columns {
		fmt.Fprint(tw, c.Header+"\t")
	}
	fmt.Fprintln(tw)
	for _, row := range r.Rows {
		balance := "-"
		if row.BalanceOK != nil {
			balance = "exact"
			if !*row.BalanceOK {
				balance = "WRONG"
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", row.Boundary, row.Attempts, row.DuplicatesDelivered,
			row.DuplicatesSuppressed, row.EffectsApplied, row.Lost, row.DuplicatedEffects, row.Refused, row.LateDuplicates, balance)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var notes []string
	if late := r.late(); late > 0 {
		notes = append(notes, fmt.Sprintf("%d late request(s) or message(s) applied: retried after the key's retention window or arrived after their deadline, and run again", late))
	}
	if refused := r.refused(); refused > 0 {
		codes := "(410), requests past their deadline (412)"
		if r.API == APIGRPC {
			codes = "(FAILED_PRECONDITION), calls past their deadline (DEADLINE_EXCEEDED)"
		}
		notes = append(notes, fmt.Sprintf("%d late request(s) or message(s) refused, not applied: retries past the key's retention window %s, "+
			"messages past their deadline (dead-lettered as \"deadline\"; their orders are not charged)", refused, codes))
	}
	if r.Unanswered > 0 {
		notes = append(notes, fmt.Sprintf("%d order(s) never answered: the client gave up; each may exist at most once", r.Unanswered))
	}
	if d := r.DeliveriesPerOrder(); d > 0 && r.Queue != nil {
		notes = append(notes, fmt.Sprintf("%.2f claims per order reached the consumers (1 = each message claimed once)", d))
	} else if d > 0 {
		notes = append(notes, fmt.Sprintf("%.2f broker deliveries per order reached the consumers (1 = no redelivery; injected duplicates left out); "+
			"%d injected lost ack(s) and %d failed ack(s) each made one", d, r.Faults[chaos.FaultLostAck], r.AcksFailed))
	}
	if r.DeadLetters > 0 {
		notes = append(notes, fmt.Sprintf("%d message(s) in the dead-letter table", r.DeadLetters))
	}
	if r.Unsettled > 0 {
		notes = append(notes, fmt.Sprintf("the flow did not settle within the timeout: %d step(s) of orders (publish, apply, pay, show) were still pending%s "+
			"and count as lost above; on a slow or loaded machine, run again with a longer --timeout", r.Unsettled, r.Pending.paren()))
	}
	for _, n := range notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	if r.Queue != nil {
		r.Queue.write(w)
	}
	if r.Audit != nil {
		r.Audit.write(w)
	}
	if r.DBCrash != nil {
		r.DBCrash.write(w)
	}
	if r.Failover != nil {
		r.Failover.write(w)
	}
	if r.Skew != nil {
		r.Skew.write(w)
	}
	verdict := "OK: nothing lost, nothing doubled"
	if !r.OK() {
		verdict = "FAILED: " + strings.Join(r.failures(), "; ")
	}
	_, err := fmt.Fprintf(w, "\n%s (balance %d, orders sum %d; %.1fs, %.0f orders/s end to end)\n",
		verdict, r.Balance, r.OrderSum, r.Elapsed.Seconds(), r.Throughput())
	return err
}

func (r *Report) late() int {
	n := 0
	for _, row := range r.Rows {
		n += row.LateDuplicates
	}
	return n
}

func (r *Report) refused() int {
	n := 0
	for _, row := range r.Rows {
		n += row.Refused
	}
	return n
}

func (r *Report) failures() []string {
	var out []string
	if r.Unsettled > 0 {
		out = append(out, fmt.Sprintf("did not settle in time, %d step(s) pending%s", r.Unsettled, r.Pending.paren()))
	}
	for _, row := range r.Rows {
		if row.Lost > 0 {
			out = append(out, fmt.Sprintf("%s lost %d", row.Boundary, row.Lost))
		}
		if row.DuplicatedEffects > 0 {
			out = append(out, fmt.Sprintf("%s doubled %d", row.Boundary, row.DuplicatedEffects))
		}
		if row.LateDuplicates > 0 {
			what := "request(s)"
			if row.Boundary == BoundaryInbox || row.Boundary == BoundaryQueueConsumer {
				what = "message(s)"
			}
			out = append(out, fmt.Sprintf("%s applied %d late %s", row.Boundary, row.LateDuplicates, what))
		}
		if row.BalanceOK != nil && !*row.BalanceOK {
			out = append(out, row.Boundary+" balance wrong")
		}
	}
	if r.DBCrash != nil && !r.DBCrash.ok() {
		out = append(out, r.DBCrash.failure())
	}
	if len(out) == 0 {
		out = append(out, "no boundary checked")
	}
	return out
}
