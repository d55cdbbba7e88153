package verify

import (
	"fmt"
	"io"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/idemhq/idem/idemsql"
)

// Clock skew between the run's nodes (idem verify --skew D): every gateway,
// consumer process, payment worker (its effect fence) and, with --broker db:,
// every queue consumer reads a clock of its own, offset from the run's by +D/2
// or −D/2 in turn, so that two nodes of a kind disagree by D. What reads the
// database server's clock (key stores on PostgreSQL, MySQL, Redis; broker ack
// waits) is not skewed: that is the point the report makes.

// MaxSkew bounds Flow.Skew: beyond it the run's deadlines (deadlineBudget, 30
// minutes, which must outlast clock jumps of ±10 minutes and the skew) and its
// leases (2×D) would stop meaning what the checks assume.
const MaxSkew = 10 * time.Minute

// skewLeaseFactor: with Skew set, every lease the run reads on a caller's clock
// (the effect fence's, the queue's) is at least skewLeaseFactor×Skew. A live
// holder renews every Lease/3, so a node D ahead takes its lease over only when
// D > 2/3 of it; at 2×D the margin is D/3 for a renewal to land.
const skewLeaseFactor = 2

// SkewNode is one node of the run and its clock.
type SkewNode struct {
	Node   string        `json:"node"`      // "gateway 1", "consumer 2", "payment worker 1"
	Offset time.Duration `json:"offset_ns"` // from the run's clock
	// Reads says what the offset clock drives on that node.
	Reads string `json:"reads"`
}

// SkewStore is which clock one of the run's stores or leases trusts.
type SkewStore struct {
	Component string `json:"component"`
	Clock     string `json:"clock"` // "server" or "caller"
	Skewed    bool   `json:"skewed"`
	Note      string `json:"note"`
}

// SkewReport is the "clock skew" section of a run with Flow.Skew.
type SkewReport struct {
	Skew       time.Duration `json:"skew_ns"`
	FenceLease time.Duration `json:"fence_lease_ns"`
	QueueLease time.Duration `json:"queue_lease_ns,omitempty"` // --broker db: only
	// Tolerance is the skew the run's shortest caller-clock lease tolerates
	// (2/3 of it): Skew must be below it.
	Tolerance time.Duration `json:"tolerance_ns"`
	Nodes     []SkewNode    `json:"nodes"`
	Stores    []SkewStore   `json:"stores"`
	// FenceTakeovers counts the effect calls that completed on a later token
	// (idem_effects_total outcome "recovered"): after a failed call released the
	// effect, after a killed worker's lease ran out, or after a node ahead cut a
	// live one short. QueueTakeovers is QueueStats.Takeovers (--broker db:).
	FenceTakeovers int `json:"fence_takeovers"`
	QueueTakeovers int `json:"queue_takeovers,omitempty"`
	// NotSkewed lists what runs on one clock all the same, and why.
	NotSkewed []string `json:"not_skewed,omitempty"`
}

// skewOffset is the offset of the i-th node of a kind: +D/2, −D/2, +D/2, …
func (f *Flow) skewOffset(i int) time.Duration {
	if i%2 == 0 {
		return f.Skew / 2
	}
	return -(f.Skew - f.Skew/2)
}

// skewLease is a caller-clock lease of the run: base, or skewLeaseFactor×Skew if
// longer.
func (f *Flow) skewLease(base time.Duration) time.Duration {
	return max(base, skewLeaseFactor*f.Skew)
}

// wallAt is a clock off the wall clock by off.
func wallAt(off time.Duration) func() time.Time {
	if off == 0 {
		return time.Now
	}
	return func() time.Time { return time.Now().Add(off) }
}

// flowAt is the run's clock (the flow's, which jumps on SQLite) off by off.
func (r *run) flowAt(off time.Duration) func() time.Time {
	if off == 0 {
		return r.now
	}
	return func() time.Time { return r.now().Add(off) }
}

// skewNode records a node of the run and its offset, for the report.
func (r *run) skewNode(node string, off time.Duration, reads string) {
	if r.f.Skew == 0 {
		return
	}
	r.skewMu.Lock()
	defer r.skewMu.Unlock()
	for _, n := range r.skewNodes {
		if n.Node == node {
			return // a process started again: the same node, the same clock
		}
	}
	r.skewNodes = append(r.skewNodes, SkewNode{Node: node, Offset: off, Reads: reads})
}

// skewSummary builds the report's clock skew section.
func (r *run) skewSummary(rep *Report) *SkewReport {
	store := r.txdb.Driver.Dialect().String()
	f := r.f
	s := &SkewReport{Skew: f.Skew, FenceLease: r.payLease, Tolerance: 2 * r.payLease / 3}
	if r.queue != nil {
		s.QueueLease = r.queueLease()
		s.Tolerance = min(s.Tolerance, 2*s.QueueLease/3)
		if rep.Queue != nil {
			s.QueueTakeovers = rep.Queue.Takeovers
		}
	}
	r.skewMu.Lock()
	s.Nodes = append(s.Nodes, r.skewNodes...)
	r.skewMu.Unlock()
	s.FenceTakeovers = r.counted("idem_effects_total", "outcome", "recovered")
	server := func(c, note string) SkewStore { return SkewStore{Component: c, Clock: "server", Note: note} }
	caller := func(c string, skewed bool, note string) SkewStore {
		return SkewStore{Component: c, Clock: "caller", Skewed: skewed, Note: note}
	}
	switch {
	case f.Unsafe:
		s.Stores = append(s.Stores, SkewStore{Component: "key store", Clock: "none", Note: "--unsafe keeps no keys"})
	case r.txdb.Driver.Dialect() == idemsql.SQLite:
		s.Stores = append(s.Stores, caller("key store ("+store+")", false,
			"idemsqlite's Config.Now: one store in one process (an embedded database has one node), on the run's clock, which jumps"))
	default:
		s.Stores = append(s.Stores, server("key store ("+store+")", "leases, retention and tokens on the database server's clock: the nodes' skew does not reach them"))
	}
	s.Stores = append(s.Stores,
		caller("effect fence (payments)", !f.Unsafe, fmt.Sprintf("effect.Config.Now of each worker; lease %v", r.payLease)),
		caller("stale-key and deadline checks", true, "idemhttp Config.Now of each gateway, inbox Config.Now of each consumer"))
	if r.queue != nil {
		s.Stores = append(s.Stores, caller("queue (database as the queue)", true,
			fmt.Sprintf("queue.Config.Now of each consumer's queue: run-at times and leases (lease %v); the order service enqueues on the run's clock", s.QueueLease)))
	} else {
		s.Stores = append(s.Stores, server("broker redelivery ("+f.Broker.Name()+")", "the broker's ack wait runs on the broker's clock"))
	}
	if f.API == APIGRPC {
		s.NotSkewed = append(s.NotSkewed, "the gRPC order API runs one server on the run's clock (only the HTTP API runs two gateways)")
	}
	s.NotSkewed = append(s.NotSkewed, "the payment API's own idempotency store (in memory, one process)", "the run's audit and the outbox relay (one process each)")
	return s
}

// counted sums the counter name of the run's registry over the series whose
// label is value.
func (r *run) counted(name, label, value string) int {
	mfs, err := r.reg.Gather()
	if err != nil {
		return 0
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabel(m, label, value) {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return int(n)
}

func hasLabel(m *dto.Metric, label, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == label && l.GetValue() == value {
			return true
		}
	}
	return false
}

func (s *SkewReport) write(w io.Writer) {
	fmt.Fprintf(w, "\nclock skew (--skew %v): the nodes' clocks disagree by %v; tolerance of the run's caller-clock leases %v (2/3 of the shortest)\n",
		s.Skew, s.Skew, s.Tolerance.Round(time.Millisecond))
	for _, n := range s.Nodes {
		sign := "+"
		if n.Offset < 0 {
			sign = ""
		}
		fmt.Fprintf(w, "  %-18s %6s  (%s)\n", n.Node, sign+n.Offset.String(), n.Reads)
	}
	fmt.Fprintln(w, "  which clock each part trusts:")
	for _, st := range s.Stores {
		skew := ""
		if st.Clock == "caller" {
			skew = ", not skewed"
			if st.Skewed {
				skew = ", skewed per node"
			}
		}
		fmt.Fprintf(w, "    %-40s %s's clock%s: %s\n", st.Component, st.Clock, skew, st.Note)
	}
	fmt.Fprintf(w, "  effect calls completed on a later token: %d (after a failed call released the effect, a killed worker's lease ran out, or a clock ahead cut a live one short)", s.FenceTakeovers)
	if s.QueueLease > 0 {
		fmt.Fprintf(w, "; queue lease takeovers: %d", s.QueueTakeovers)
	}
	fmt.Fprintln(w)
	if len(s.NotSkewed) > 0 {
		fmt.Fprintf(w, "  on the run's clock all the same: %s\n", strings.Join(s.NotSkewed, "; "))
	}
}
