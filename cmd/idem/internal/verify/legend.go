package verify

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/idemhq/idem/chaos"
)

// The legend of the report: what each boundary, column and fault of the table
// means. WriteTable prints the columns' headers from Columns and idem verify
// --help prints WriteLegend, so the two cannot drift apart.

// Column is one column of the table and what it counts.
type Column struct{ Header, Meaning string }

// Columns are the table's columns, in order.
var Columns = []Column{
	{"boundary", "where a message or request crosses from one part to the next"},
	{"attempts", "requests, publishes or deliveries that crossed it, retries and copies included"},
	{"dup delivered", "attempts beyond one per order: the copies that faults, retries and redeliveries made"},
	{"dup suppressed", "copies idem recognised and did not apply again (a replayed response, a skipped message). " +
		"It is below dup delivered when a copy came after an attempt that took no effect (killed before its commit, " +
		"refused while the first was running): applying it then is right, not a duplicate"},
	{"effects", "rows, charges or events that took effect"},
	{"lost", "orders with no effect at this boundary (must be 0)"},
	{"dup effects", "effects beyond one per order within the key's retention window (must be 0)"},
	{"refused", "late requests and messages idem refused instead of applying: retries whose key is older than the retention " +
		"window (410; gRPC: FAILED_PRECONDITION), requests that arrived past their Idem-Deadline (412; gRPC: calls past their " +
		"deadline, DEADLINE_EXCEEDED), and deliveries of messages past theirs " +
		"(dead-lettered as \"deadline\"; their orders are not expected in the ledger, payments or push)"},
	{"late applied", "effects of late requests and messages: a retry after the retention window, a request past its deadline whose " +
		"order was placed again, or a message applied past its deadline (must be 0; --unsafe applies them)"},
	{"balance", "exact when the running total equals the sum of the orders; - where the boundary keeps none"},
}

// Term is a row or a fault of the table and what it means.
type Term struct{ Name, Meaning string }

// Boundaries are the table's rows, in order (--relay cdc names the relay's
// BoundaryRelayCDC).
var Boundaries = []Term{
	{BoundaryHTTP, "each order request, sent with an Idempotency-Key and retried, made one order (idemhttp)"},
	{BoundaryGRPC, "with --api grpc: each PlaceOrder call, sent with idempotency-key metadata and retried by grpc-go, made one order (idemgrpc)"},
	{BoundaryOutbox, "each order wrote one outbox message in its transaction (outbox)"},
	{BoundaryRelay, "each outbox message reached the broker (outbox.Relay)"},
	{BoundaryInbox, "each message was applied to the ledger and the balance once (inbox)"},
	{BoundaryQueue, "with --broker db: (instead of the outbox and relay rows): each order wrote one message into the database's queue in its transaction (queue.EnqueueTx)"},
	{BoundaryQueueConsumer, "with --broker db: (instead of the broker row): each message claimed from the queue was applied once, and retired in its effect's transaction (inbox, queue.Source)"},
	{BoundaryPayment, "each applied order was charged once by a payment API that is not transactional (effect.Fence)"},
	{BoundaryPush, "each ledger event was shown once, in order, to the browsers watching over WebSocket (stream)"},
	{BoundaryAudit, "(the section under the table) the audit (package audit), every second over the run's database: " +
		"published messages the consumer had not applied --audit-grace later are missing, and --repair republishes them under their ids; " +
		"its figures at the end, the repairs (of messages the broker lost, and needless ones the inbox dropped by key) and its sentence"},
}

// Faults are the faults a run injects, as the table names them.
var Faults = []Term{
	{chaos.FaultDropResponse, "the service ran the request, the client never got the answer and retries"},
	{chaos.FaultDuplicateRequest, "the client sends the same request twice, at once"},
	{FaultGRPCDropResponse, "(--api grpc) the service ran the call, the server answers UNAVAILABLE instead of its response, grpc-go retries"},
	{FaultGRPCDuplicateCall, "(--api grpc) the client sends the same call twice, at once"},
	{FaultGRPCPastDeadline, "(--api grpc) a call waits in the server past its deadline, and its client has placed the order again (refused, or cancelled)"},
	{FaultLateRetry, "a request retried after the key's retention window (refused, or late applied)"},
	{FaultPastDeadline, "a request reaches the service after its deadline, and its client has placed the order again (refused, or late applied)"},
	{FaultMessagePastDeadline, "an order's event is read by the consumer after its deadline, as if it waited in the outbox past it (refused, or late applied)"},
	{chaos.FaultRelayCrash, "the relay dies after publishing, before marking the message published"},
	{chaos.FaultPublishError, "a publish fails and is retried"},
	{FaultBrokerLoss, "(--broker-loss) the broker acknowledges a message and loses it, as JetStream an unsynced write on power failure: " +
		"the outbox marks it published, no consumer gets it until the audit republishes it (lost without --repair)"},
	{chaos.FaultDuplicateDelivery, "the broker delivers a message twice"},
	{chaos.FaultLostAck, "a consumer's ack is lost: the message comes again (not with --broker db:, whose retirement commits with the effect: no separate ack to lose)"},
	{chaos.FaultCrashBeforeEffect, "a consumer dies before applying the message"},
	{chaos.FaultCrashAfterEffect, "a consumer dies after applying it, before its commit"},
	{chaos.FaultCrashAfterCommit, "a consumer dies after its commit, before the ack (--broker db: its leases run out)"},
	{chaos.FaultPaused, "a consumer stalls past the ack wait while its message is redelivered (--broker db: with its claimed batch and its lease renewals, until another consumer took the message over)"},
	{FaultRestart, "a killed relay or consumer started again"},
	{FaultPaymentResponseDropped, "the payment API charged, its answer is lost"},
	{FaultPaymentWorkerKilled, "a payment worker dies after the call, before recording it"},
	{FaultPaymentWorkerPaused, "a payment worker stalls past its lease while another takes over"},
	{FaultPushKicked, "the server drops a browser's socket; it reconnects and resumes"},
	{FaultPushCut, "every browser connection is cut in the network"},
	{FaultDBCut, "the database connections are cut (TCP proxy; not SQLite)"},
	{FaultDBCrash, "(--db-crash) the database server is killed (SIGKILL) and restarted at once on its data (--db postgres: or mysql:)"},
	{FaultBrokerCut, "the broker connections are cut (TCP proxy: NATS, Redis, RabbitMQ)"},
	{FaultNodeKill, "a broker node is killed and restarted (nats-cluster:)"},
	{FaultRouteCut, "the routes between broker nodes are cut (nats-cluster:)"},
	{FaultClockJump, "the clock that drives key expiry jumps (SQLite)"},
}

// WriteLegend writes the boundaries, columns and faults for idem verify --help,
// in lines of at most 80 columns.
func WriteLegend(w io.Writer) error {
	var b strings.Builder
	section := func(title string, terms []Term) {
		width := 0
		for _, t := range terms {
			width = max(width, utf8.RuneCountInString(t.Name))
		}
		fmt.Fprintf(&b, "%s:\n", title)
		for _, t := range terms {
			fmt.Fprintf(&b, "  %-*s  %s\n", width, t.Name, wrap(t.Meaning, 78-width-4, width+4))
		}
	}
	section("Rows (boundaries)", Boundaries)
	b.WriteString("\n")
	columns := make([]Term, len(Columns))
	for i, c := range Columns {
		columns[i] = Term{c.Header, c.Meaning}
	}
	section("Columns", columns)
	b.WriteString("\n")
	section("Faults", Faults)
	_, err := io.WriteString(w, b.String())
	return err
}

// wrap breaks s into lines of at most width bytes, indenting the lines after the
// first by indent spaces.
func wrap(s string, width, indent int) string {
	var out, line strings.Builder
	for _, word := range strings.Fields(s) {
		if line.Len() > 0 && line.Len()+1+len(word) > width {
			out.WriteString(line.String() + "\n" + strings.Repeat(" ", indent))
			line.Reset()
		}
		if line.Len() > 0 {
			line.WriteByte(' ')
		}
		line.WriteString(word)
	}
	return out.String() + line.String()
}
