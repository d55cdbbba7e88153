// Package chaos injects faults into exactly-once flows and checks the result from the
// databases themselves: every effect applied once, none lost, none doubled.
//
// A Report has one Row per boundary of the flow (HTTP, outbox, broker → consumer, …).
// Today the consumer boundary is built (ConsumerFlow); later boundaries add rows.
package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Row is what one boundary delivered and what reached the database.
type Row struct {
	Boundary             string `json:"boundary"`
	Attempts             int    `json:"attempts"`              // deliveries processed
	DuplicatesDelivered  int    `json:"duplicates_delivered"`  // deliveries beyond one per effect
	DuplicatesSuppressed int    `json:"duplicates_suppressed"` // deliveries recognised as done and not applied
	EffectsApplied       int    `json:"effects_applied"`       // effect rows in the database
	Lost                 int    `json:"lost"`                  // effects that never reached the database
	DuplicatedEffects    int    `json:"duplicated_effects"`    // effect rows beyond one per effect
	BalanceOK            bool   `json:"balance_ok"`            // the running total equals the sum of the effects
}

// OK reports whether the boundary kept its promise.
func (r Row) OK() bool { return r.Lost == 0 && r.DuplicatedEffects == 0 && r.BalanceOK }

// Report is the result of one verification run.
type Report struct {
	Seed      int64          `json:"seed"`
	FaultRate float64        `json:"fault_rate"`
	Ops       int            `json:"ops"`
	Store     string         `json:"store"`
	Unsafe    bool           `json:"unsafe"`
	Faults    map[string]int `json:"faults"` // injected faults by kind
	Rows      []Row          `json:"rows"`
	Elapsed   time.Duration  `json:"elapsed_ns"`
}

// OK reports whether every boundary kept its promise.
func (r *Report) OK() bool {
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

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report for a person: one row per boundary, the faults, and
// the verdict.
func (r *Report) WriteTable(w io.Writer) error {
	mode := "exactly-once (idem)"
	if r.Unsafe {
		mode = "UNSAFE: plain at-least-once, idem's protection off (negative control)"
	}
	fmt.Fprintf(w, "idem verify: %d effects on %s, seed %d, fault rate %.0f%%, %s\n",
		r.Ops, r.Store, r.Seed, r.FaultRate*100, mode)
	fmt.Fprintf(w, "faults injected: %d (%s)\n\n", r.FaultTotal(), r.faultList())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "boundary\tattempts\tdup delivered\tdup suppressed\teffects applied\tlost\tdup effects\tbalance\t")
	for _, row := range r.Rows {
		balance := "exact"
		if !row.BalanceOK {
			balance = "WRONG"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", row.Boundary, row.Attempts, row.DuplicatesDelivered,
			row.DuplicatesSuppressed, row.EffectsApplied, row.Lost, row.DuplicatedEffects, balance)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	verdict := "OK: nothing lost, nothing doubled"
	if !r.OK() {
		verdict = "FAILED: effects were lost or doubled"
	}
	secs := r.Elapsed.Seconds()
	_, err := fmt.Fprintf(w, "\n%s (%.1fs, %.0f effects/s)\n", verdict, secs, float64(r.Ops)/max(secs, 1e-9))
	return err
}

func (r *Report) faultList() string {
	kinds := make([]string, 0, len(r.Faults))
	for k := range r.Faults {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s %d", k, r.Faults[k])
	}
	return strings.Join(parts, ", ")
}
