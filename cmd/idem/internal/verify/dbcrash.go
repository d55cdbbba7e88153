package verify

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"
)

// FaultDBCrash: the database server is killed (SIGKILL) and started again at
// once on its data directory (Flow.DBCrash).
const FaultDBCrash = "db_server_crash"

// DBCrasher kills the run's database server and starts it again: a private server
// the run owns (internal/pgcluster, internal/mariadbproc).
type DBCrasher interface {
	// Kill crashes the server (SIGKILL) and returns once it is gone.
	Kill() error
	// Restart starts it again on the same data and port and returns once it
	// accepts connections (its crash recovery done).
	Restart(ctx context.Context) error
}

// DBCrashStats is what the database crashes did (Flow.DBCrash); nil without them.
type DBCrashStats struct {
	Asked    int      `json:"asked"`    // Flow.DBCrash
	Kills    int      `json:"kills"`    // SIGKILLs sent
	Restarts int      `json:"restarts"` // restarts that came up
	Outages  []Outage `json:"outages"`
	// Error is why a kill or a restart failed, or why fewer kills than asked
	// happened; the run fails with it.
	Error string `json:"error,omitempty"`
}

// Outage is one kill of the database server and what followed it, up to the next
// kill or the end of the run. The durations are measured, not asserted.
type Outage struct {
	AtPlaced int `json:"at_placed"` // orders acknowledged when the server was killed
	// Down is from the kill until the restarted server accepted connections
	// (its crash recovery included).
	Down time.Duration `json:"down_ns"`
	// FirstAck is from the kill until the next order acknowledged to its client
	// after the restart: the outage as the clients saw it. 0 if none was.
	FirstAck time.Duration `json:"first_ack_ns"`
	// PlacedAfter and AppliedAfter count the orders acknowledged, and the orders
	// applied to the ledger, from the restart until the next kill (or the end of
	// the run): the components came back without a restart of their own.
	PlacedAfter  int `json:"placed_after"`
	AppliedAfter int `json:"applied_after"`
	// Warnings counts the warnings and errors the components (clients, order
	// service, relay, consumers, payments) logged over the same span: the
	// failures they met and retried.
	Warnings int `json:"warnings"`
	// Stops counts the relay and consumer incarnations that returned an error
	// over the span and were started again by their supervisor (not the run's
	// injected kills).
	Stops int `json:"component_stops"`
}

// ok reports whether every kill asked for happened and the flow resumed after each.
func (s *DBCrashStats) ok() bool {
	if s.Error != "" || s.Kills < s.Asked || s.Restarts < s.Kills {
		return false
	}
	for _, o := range s.Outages {
		if o.PlacedAfter == 0 && o.AppliedAfter == 0 {
			return false
		}
	}
	return true
}

func (s *DBCrashStats) failure() string {
	if s.Error != "" {
		return "database crash: " + s.Error
	}
	if s.Kills < s.Asked || s.Restarts < s.Kills {
		return fmt.Sprintf("database crash: %d of %d kills, %d restarts", s.Kills, s.Asked, s.Restarts)
	}
	return "database crash: the flow did not resume after a restart"
}

func (s *DBCrashStats) write(w io.Writer) {
	fmt.Fprintf(w, "database crash: %d of %d kills (SIGKILL of the server, restarted at once on its data), %d restarts\n", s.Kills, s.Asked, s.Restarts)
	for i, o := range s.Outages {
		first := "no order acknowledged after it"
		if o.FirstAck > 0 {
			first = fmt.Sprintf("first order acknowledged %.2fs after the kill", o.FirstAck.Seconds())
		}
		fmt.Fprintf(w, "  crash %d at %d orders acknowledged: server down %.2fs, %s; then %d orders acknowledged, %d applied; %d warnings logged, %d relay/consumer stops\n",
			i+1, o.AtPlaced, o.Down.Seconds(), first, o.PlacedAfter, o.AppliedAfter, o.Warnings, o.Stops)
	}
	if s.Error != "" {
		fmt.Fprintf(w, "  error: %s\n", s.Error)
	}
}

// noteStop counts a relay or consumer incarnation that stopped on an error.
func (r *run) noteStop() {
	r.stopped.Add(1)
}

// crashes is the state of the database crashes of a run.
type crashes struct {
	mu    sync.Mutex
	stats DBCrashStats
	// At the restart of the current outage: the counters its span starts from.
	restartAt                        time.Time
	placed0, applied0, warn0, stops0 int
	killedAt                         time.Time
	waitingAck                       bool
}

// applied counts the orders in the ledger, -1 if the database does not answer.
func (r *run) applied(ctx context.Context) int {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n := -1
	if err := r.f.DB.QueryRowContext(ctx, "SELECT COUNT(DISTINCT order_id) FROM "+tableLedger).Scan(&n); err != nil {
		return -1
	}
	return n
}

// crashDB kills the database server Flow.DBCrash times, after
// Orders*i/(DBCrash+1) orders have been acknowledged, and restarts it at once.
// It watches the progress counters; it never waits a fixed time for a fault.
func (r *run) crashDB(ctx context.Context) {
	c := r.crashes
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for i := 1; i <= r.f.DBCrash; {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		placed := int(r.placed.Load())
		c.noteAck(placed)
		if placed < r.f.Orders*i/(r.f.DBCrash+1) {
			continue
		}
		i++
		c.closeSpan(r, placed, r.applied(ctx))
		killed := time.Now()
		if err := r.f.Crasher.Kill(); err != nil {
			c.fail(fmt.Sprintf("kill %d: %v", i-1, err))
			return
		}
		r.inj.Count(FaultDBCrash)
		c.mu.Lock()
		c.stats.Kills++
		c.stats.Outages = append(c.stats.Outages, Outage{AtPlaced: placed})
		c.mu.Unlock()
		if err := r.f.Crasher.Restart(ctx); err != nil {
			c.fail(fmt.Sprintf("restart %d: %v", i-1, err))
			return
		}
		up := time.Now()
		c.mu.Lock()
		c.stats.Restarts++
		o := &c.stats.Outages[len(c.stats.Outages)-1]
		o.Down = up.Sub(killed)
		c.restartAt, c.killedAt, c.waitingAck = up, killed, true
		c.placed0, c.warn0, c.stops0 = int(r.placed.Load()), int(r.warnings.Load()), int(r.stopped.Load())
		c.mu.Unlock()
		// The ledger's count once the server answers again: a query of the restarted
		// server through the flow's own pool.
		a := r.applied(ctx)
		c.mu.Lock()
		c.applied0 = a
		c.mu.Unlock()
	}
	// After the last restart: watch for the first acknowledgement.
	for {
		c.mu.Lock()
		waiting := c.waitingAck
		c.mu.Unlock()
		if !waiting {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		c.noteAck(int(r.placed.Load()))
	}
}

// noteAck records the first acknowledgement after the current restart.
func (c *crashes) noteAck(placed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waitingAck && placed > c.placed0 {
		c.stats.Outages[len(c.stats.Outages)-1].FirstAck = time.Since(c.killedAt)
		c.waitingAck = false
	}
}

// closeSpan ends the span of the current outage, if any, at placed orders
// acknowledged and applied in the ledger.
func (c *crashes) closeSpan(r *run, placed, applied int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.stats.Outages) == 0 || c.restartAt.IsZero() {
		return
	}
	o := &c.stats.Outages[len(c.stats.Outages)-1]
	o.PlacedAfter = placed - c.placed0
	if applied >= 0 && c.applied0 >= 0 {
		o.AppliedAfter = applied - c.applied0
	}
	o.Warnings = int(r.warnings.Load()) - c.warn0
	o.Stops = int(r.stopped.Load()) - c.stops0
	c.restartAt = time.Time{}
}

func (c *crashes) fail(msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.Error = msg
}

// summary closes the last span and returns the stats for the report.
func (c *crashes) summary(r *run, ctx context.Context) *DBCrashStats {
	c.closeSpan(r, int(r.placed.Load()), r.applied(ctx))
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Outages = append([]Outage(nil), c.stats.Outages...)
	if s.Error == "" && s.Kills < s.Asked {
		s.Error = fmt.Sprintf("%d of %d kills happened: the next was due at %d orders acknowledged, the run ended at %d", s.Kills, s.Asked, r.f.Orders*(s.Kills+1)/(s.Asked+1), r.placed.Load())
	}
	return &s
}
