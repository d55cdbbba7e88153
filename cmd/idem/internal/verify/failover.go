package verify

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem/internal/wait"
)

// Failover is a primary failover of the run's PostgreSQL (idem verify --failover):
// once half the orders are answered, Kill kills the primary and Promote promotes a
// standby. Every component holds one multi-host URL (target_session_attrs=
// read-write) and finds the new primary on its own: nothing is restarted for it.
type Failover struct {
	// Mode names the replication in the report: "sync" or "async".
	Mode string
	// Kill kills the primary (SIGKILL of every process of it).
	Kill func(ctx context.Context) error
	// Promote promotes a standby, points the others at it, and returns its name
	// once it accepts writes.
	Promote func(ctx context.Context) (string, error)
}

// FailoverReport is what the run saw of the failover and what the databases say
// it cost.
type FailoverReport struct {
	Mode        string `json:"mode"`
	KilledAfter int    `json:"killed_after"` // orders answered (or given up) when the primary was killed
	AckedAtKill int    `json:"acked_at_kill"`
	Promoted    string `json:"promoted"`
	// Outage runs from the kill until the promoted standby accepted a write.
	Outage time.Duration `json:"outage_ns"`
	// APIResumed, RelayResumed and ConsumersResumed run from the kill until the
	// first order was accepted, the first message published and the first
	// delivered after the promotion: each component reconnected on its own.
	APIResumed       time.Duration `json:"api_resumed_ns"`
	RelayResumed     time.Duration `json:"relay_resumed_ns"`
	ConsumersResumed time.Duration `json:"consumers_resumed_ns"`
	// Warnings are the warnings the relays, consumers and API logged, and Restarts
	// the relay and consumer processes started again (after an injected crash:
	// none is restarted for the failover), from the kill until all resumed.
	Warnings int `json:"warnings"`
	Restarts int `json:"restarts"`
	// Stopped counts the relays and consumers among Restarts that stopped on an
	// error of their own (not an injected kill): those the failover made their
	// supervisor start again. 0: every component rode the failover out.
	Stopped int `json:"stopped"`
	// NoRelay: the run has no relay (the database as the queue); RelayResumed
	// stays 0.
	NoRelay bool `json:"no_relay,omitempty"`
	// AckedAbsent counts orders the service answered 201 that are not in the
	// database after the failover: commits the old primary acknowledged and no
	// standby had (asynchronous replication). Lost by the database, not by idem.
	AckedAbsent int `json:"acked_absent"`
	// Lost and Doubled are the sums of the rows' lost and duplicated effects.
	Lost    int `json:"lost"`
	Doubled int `json:"doubled"`
	// ChargedVanished counts payments the payment API made (an effect outside the
	// database, through the fence) for orders the database no longer has.
	ChargedVanished int `json:"charged_vanished"`
	// Error is why the failover did not happen, if it did not.
	Error string `json:"error,omitempty"`
}

// failover kills the primary once half the orders are answered, promotes a
// standby, and waits (a minute at most) for the API, the relay and the consumers
// to make progress again.
func (r *run) failover(ctx context.Context) {
	fo := r.f.Failover
	st := &FailoverReport{Mode: fo.Mode}
	r.fo = st
	half := int64(max(r.f.Orders/2, 1))
	for r.placed.Load() < half { // by progress, not by time
		if !wait.Sleep(ctx, 5*time.Millisecond) {
			st.Error = "the run ended before half the orders were answered"
			return
		}
	}
	st.KilledAfter, st.AckedAtKill = int(r.placed.Load()), int(r.accepted.Load())
	w0, rs0, sp0 := r.warnings.Load(), r.restarts.Load(), r.stopped.Load()
	st.NoRelay = r.queue != nil
	t0 := time.Now()
	if err := fo.Kill(ctx); err != nil {
		st.Error = "kill the primary: " + err.Error()
		return
	}
	name, err := fo.Promote(ctx)
	st.Outage = time.Since(t0)
	if err != nil {
		st.Error = "promote a standby: " + err.Error()
		return
	}
	st.Promoted = name
	acc, pub, del := r.accepted.Load(), r.published.Total(), r.delivered.Total()
	deadline := time.Now().Add(time.Minute)
	for (st.APIResumed == 0 || (st.RelayResumed == 0 && !st.NoRelay) || st.ConsumersResumed == 0) && time.Now().Before(deadline) {
		if st.APIResumed == 0 && (r.accepted.Load() > acc || r.placed.Load() >= int64(r.f.Orders)) {
			st.APIResumed = time.Since(t0)
		}
		if st.RelayResumed == 0 && r.published.Total() > pub {
			st.RelayResumed = time.Since(t0)
		}
		if st.ConsumersResumed == 0 && r.delivered.Total() > del {
			st.ConsumersResumed = time.Since(t0)
		}
		if !wait.Sleep(ctx, 5*time.Millisecond) {
			break
		}
	}
	st.Warnings, st.Restarts, st.Stopped = int(r.warnings.Load()-w0), int(r.restarts.Load()-rs0), int(r.stopped.Load()-sp0)
}

// failoverSummary fills in what the databases say the failover cost.
func (r *run) failoverSummary(ctx context.Context, rep *Report) error {
	st := r.fo
	for _, row := range rep.Rows {
		if row.Boundary == BoundaryHTTP || row.Boundary == BoundaryGRPC {
			st.AckedAbsent = row.Lost
		}
		st.Lost += row.Lost
		st.Doubled += row.DuplicatedEffects
	}
	ids := map[string]bool{}
	if err := r.query(ctx, "orders", "SELECT id FROM "+tableOrders, func(scan func(...any) error) error {
		var id string
		err := scan(&id)
		ids[id] = true
		return err
	}); err != nil {
		return err
	}
	for id := range r.paysvc.counts() {
		if !ids[id] {
			st.ChargedVanished++
		}
	}
	return nil
}

func (st *FailoverReport) write(w io.Writer) {
	fmt.Fprintf(w, "\nprimary failover (%s replication):\n", st.Mode)
	if st.Error != "" {
		fmt.Fprintf(w, "  did not happen: %s\n", st.Error)
		return
	}
	ms := func(d time.Duration) string {
		if d == 0 {
			return "not within a minute"
		}
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
	fmt.Fprintf(w, "  primary killed (SIGKILL) after %d orders answered (%d accepted); %s promoted\n", st.KilledAfter, st.AckedAtKill, st.Promoted)
	relay := "relay published at " + ms(st.RelayResumed)
	if st.NoRelay {
		relay = "no relay (the database is the queue)"
	}
	fmt.Fprintf(w, "  outage: %s until the new primary accepted a write; after the kill, orders accepted again at %s, %s, consumers received at %s\n",
		ms(st.Outage), ms(st.APIResumed), relay, ms(st.ConsumersResumed))
	how := "every relay and consumer rode it out on its own connections, reconnected through the multi-host URL"
	if st.Stopped > 0 {
		how = fmt.Sprintf("%d relay/consumer process(es) stopped on an error of their own and were started again by their supervisor; the rest reconnected through the multi-host URL", st.Stopped)
	}
	fmt.Fprintf(w, "  what idem saw: %d warning(s) logged and %d relay/consumer restart(s) (injected crashes included) from the kill until all resumed; %s\n",
		st.Warnings, st.Restarts, how)
	fmt.Fprintf(w, "  acknowledged to clients, absent after the failover: %d; lost in all rows: %d; doubled: %d; charged for orders the database lost: %d\n",
		st.AckedAbsent, st.Lost, st.Doubled, st.ChargedVanished)
	switch {
	case st.Lost == 0 && st.Doubled == 0:
		fmt.Fprintln(w, "  nothing acknowledged was lost with the old primary")
	case st.Mode == "async":
		fmt.Fprintln(w, "  asynchronous replication: the old primary acknowledged commits no standby had yet; they are lost by the database, not by idem "+
			"(their keys are gone too, so a retry would run again: the database, not idem, forgot it)")
	default:
		fmt.Fprintln(w, "  synchronous replication must lose nothing acknowledged: this is a failure")
	}
}

// countingHandler counts the records of level Warn and above, then passes them on.
type countingHandler struct {
	h slog.Handler
	n *atomic.Int64
}

func (c countingHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || c.h.Enabled(ctx, l)
}

func (c countingHandler) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Level >= slog.LevelWarn {
		c.n.Add(1)
	}
	if c.h.Enabled(ctx, rec.Level) {
		return c.h.Handle(ctx, rec)
	}
	return nil
}

func (c countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return countingHandler{c.h.WithAttrs(as), c.n}
}

func (c countingHandler) WithGroup(g string) slog.Handler {
	return countingHandler{c.h.WithGroup(g), c.n}
}
