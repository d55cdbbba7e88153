package verify

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/idemhq/idem/audit"
)

// The audit of the run: package audit over the run's database, as an operator
// would run it beside the flow, reconciling the outbox with the consumer's keys
// and, with Flow.Repair, republishing what the broker lost.

// BoundaryAudit names the audit's section of the report.
const BoundaryAudit = "outbox → consumer (audit)"

// Audit timing: a run every auditInterval; a message published longer ago than
// Flow.AuditGrace (DefaultAuditGrace plus the broker's AckWait) and not applied is
// missing.
const (
	auditInterval = time.Second
	// DefaultAuditGrace, plus the broker's AckWait, is Flow.AuditGrace when 0: well
	// above what a message in flight takes in a run on an idle machine (the clients
	// place orders faster than the consumers apply them, so the consumers' backlog
	// holds a message a few seconds at most), and above a delivery held by a paused
	// consumer, which the broker redelivers after its AckWait (a second, but 20 s on
	// Pub/Sub, which has no duplicate window to drop a needless copy). So a needless
	// republish is rare; one is harmless (the inbox drops it by key, the broker's
	// duplicate window first where it has one) and counted apart (Audit.Needless).
	DefaultAuditGrace = 10 * time.Second
)

// Audit is what the run's audit found and did.
type Audit struct {
	// Repair says whether the audit republished what was missing (Flow.Repair);
	// without it the audit only reads.
	Repair bool `json:"repair"`
	// Runs is the number of audit runs during the flow; Errors how many failed
	// (a database connection cut, under faults).
	Runs   int `json:"runs"`
	Errors int `json:"errors"`
	// Grace is the audit's grace: a message published longer ago and not applied
	// is missing.
	Grace time.Duration `json:"grace_ns"`
	// The final audit, read once the flow stopped: the messages published, applied
	// and dead-lettered by the consumer, missing (still, at the end), and in
	// flight (published within the grace, or being repaired).
	Published    int64 `json:"published"`
	Applied      int64 `json:"applied"`
	DeadLettered int64 `json:"dead_lettered"`
	Missing      int64 `json:"missing"`
	InFlight     int64 `json:"in_flight"`
	// Republished is the number of repairs made during the run; RepairedLost
	// the number of messages the broker lost (FaultBrokerLoss) that a repair
	// republished; Needless the other repairs: of messages still in flight past
	// the grace (or a lost one's second copy, its first slower than the grace),
	// whose copy the inbox dropped by key (or the broker, by its duplicate
	// window).
	Republished  int `json:"republished"`
	RepairedLost int `json:"repaired_lost"`
	Needless     int `json:"needless"`
	// Blind says why the audit could not see the consumer (--unsafe: no keys).
	Blind string `json:"blind,omitempty"`
	// Latency is enqueue → applied of the messages the final audit found applied.
	Latency audit.Latency `json:"latency"`
	// Sentence is the audit's sentence for the flow, measured.
	Sentence string `json:"sentence"`
	// Error is why the final audit could not be read, if it could not.
	Error string `json:"error,omitempty"`
	// Skipped says why the run had no audit (--broker db:: no outbox).
	Skipped string `json:"skipped,omitempty"`
	// JumpedClock says the key records' times follow the flow's clock, which
	// jumps (Flow.Clock): the latency is off by the jumps.
	JumpedClock bool `json:"jumped_clock,omitempty"`
}

// auditing is the audit of one run.
type auditing struct {
	a         *audit.Auditor // the continuous audit, repairing with Flow.Repair
	final     *audit.Auditor // read-only, for the figures at the end
	repairing bool
	mu        sync.Mutex
	runs      int
	errs      int
	// The last complete run's missing and in-flight messages.
	missing, inFlight int64
	ok                bool
}

// last returns the last complete run's missing and in-flight messages; ok is
// false before one.
func (au *auditing) last() (missing, inFlight int64, ok bool) {
	au.mu.Lock()
	defer au.mu.Unlock()
	return au.missing, au.inFlight, au.ok
}

// newAuditing sets up the audit of the run: the producer's and the consumer's
// side are the run's database.
func (r *run) newAuditing() (*auditing, error) {
	f := r.f
	side, err := audit.ConsumersIn(r.txdb, audit.Consumer{Name: consumerName, Topics: []string{f.Broker.Topic()}, Retention: f.Retention})
	if err != nil {
		return nil, err
	}
	cfg := audit.Config{
		// The run's messages, all of them, within half the keys' retention.
		Window: min(audit.DefaultWindow, f.Retention/2),
		Grace:  f.AuditGrace, Repair: f.Repair && !f.Unsafe,
		// Every message of the run may be repaired in one audit.
		MaxRepairs: max(audit.DefaultMaxRepairs, f.Orders),
		Deliveries: audit.GatherDeliveries(r.reg), Logger: r.log,
	}
	a, err := audit.New(r.txdb, cfg, side)
	if err != nil {
		return nil, fmt.Errorf("verify: the audit: %w", err)
	}
	cfg.Repair = false
	final, err := audit.New(r.txdb, cfg, side)
	if err != nil {
		return nil, fmt.Errorf("verify: the audit: %w", err)
	}
	return &auditing{a: a, final: final, repairing: f.Repair && !f.Unsafe}, nil
}

// loop audits every auditInterval until ctx ends.
func (au *auditing) loop(ctx context.Context) {
	_ = au.a.Loop(ctx, auditInterval, func(rep *audit.Report, err error) {
		au.mu.Lock()
		defer au.mu.Unlock()
		au.runs++
		if err != nil {
			au.errs++
			return
		}
		au.missing, au.inFlight, au.ok = rep.Missing(), 0, true
		for _, row := range rep.Rows {
			au.inFlight += row.InFlight
		}
	})
}

// auditSummary reads the final audit and the repairs of the run; lost holds the ids of
// the messages the broker lost.
func (r *run) auditSummary(ctx context.Context, lost map[string]bool) (*Audit, error) {
	au := r.audit
	if au == nil {
		return nil, r.auditErr
	}
	rep, err := au.final.Run(ctx)
	if err != nil {
		return nil, fmt.Errorf("the final audit: %w", err)
	}
	au.mu.Lock()
	s := &Audit{Repair: au.repairing, Runs: au.runs, Errors: au.errs, Grace: rep.Grace, Sentence: rep.Sentence(),
		JumpedClock: r.f.Clock != nil && r.f.FaultRate > 0}
	au.mu.Unlock()
	for _, row := range rep.Rows {
		s.Published += row.Published
		s.Applied += row.Applied
		s.DeadLettered += row.DeadLettered
		s.Missing += row.Missing
		s.InFlight += row.InFlight
		s.Latency = row.Latency
	}
	for _, b := range rep.Blind {
		s.Blind = b.Reason
	}
	repaired := map[string]bool{}
	for before := int64(0); ; {
		page, err := au.a.Repairs(ctx, before, audit.MaxPageSize)
		if err != nil {
			return nil, err
		}
		for _, rp := range page {
			s.Republished++
			if lost[rp.MsgID] && !repaired[rp.MsgID] {
				repaired[rp.MsgID] = true
				s.RepairedLost++
			}
			before = rp.CopyID
		}
		if len(page) < audit.MaxPageSize {
			s.Needless = s.Republished - s.RepairedLost
			return s, nil
		}
	}
}

// write writes the audit's section of the report: its figures at the end, its
// repairs, and its sentence (which says why a blind consumer is not audited).
func (s *Audit) write(w io.Writer) {
	if s.Skipped != "" {
		fmt.Fprintf(w, "\n%s: not run: %s\n", BoundaryAudit, s.Skipped)
		return
	}
	mode := "read-only (--repair=false)"
	if s.Repair {
		mode = "repairing"
	}
	fmt.Fprintf(w, "\n%s, every %s, grace %s, %s:\n", BoundaryAudit, auditInterval, s.Grace, mode)
	if s.Error != "" {
		fmt.Fprintf(w, "  not read: %s\n", s.Error)
		return
	}
	fmt.Fprintf(w, "  at the end: %d published, %d applied, %d dead-lettered, %d missing, %d in flight (%d runs, %d failed)\n",
		s.Published, s.Applied, s.DeadLettered, s.Missing, s.InFlight, s.Runs, s.Errors)
	if s.Repair {
		fmt.Fprintf(w, "  republished %d: %d message(s) the broker lost, %d needless (in flight past the grace; dropped by key)\n",
			s.Republished, s.RepairedLost, s.Needless)
	}
	for _, line := range strings.Split(strings.TrimSpace(s.Sentence), "\n") {
		fmt.Fprintf(w, "  %s\n", line)
	}
	if s.JumpedClock {
		fmt.Fprintln(w, "  (the latency is off by the clock jumps: the key records' times follow the flow's clock)")
	}
}
