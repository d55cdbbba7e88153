package audit

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Sentence is the design documents' sentence for the audited flow, measured: the
// boundaries a message crosses, the guarantee at each, and what the window held
// (applied, dead-lettered, missing, duplicates suppressed and their rate). One
// line per topic and consumer.
func (r *Report) Sentence() string {
	var b strings.Builder
	blind := map[string]bool{}
	for _, bl := range r.Blind {
		blind[bl.Consumer] = true
	}
	for _, row := range r.Rows {
		if blind[row.Consumer] {
			fmt.Fprintf(&b, "%s → %s: %d published over %s; what the consumer did with them is not known (see below).\n",
				row.Topic, row.Consumer, row.Published, human(r.To.Sub(r.From)))
			continue
		}
		fmt.Fprintf(&b, "%s → %s: outbox (in the producer's transaction) → relay and broker (at least once, the outbox id as message id) → inbox (the key in the consumer's transaction: once). Over %s: %d published, %d applied once, %d dead-lettered, %d missing, %d in flight",
			row.Topic, row.Consumer, human(r.To.Sub(r.From)), row.Published, row.Applied, row.DeadLettered, row.Missing, row.InFlight)
		if row.Republished > 0 {
			fmt.Fprintf(&b, ", %d republished by repair", row.Republished)
		}
		if d := row.Deliveries; d != nil {
			rate := 0.0
			if all := d.Processed + d.Duplicates; all > 0 {
				rate = 100 * float64(d.Duplicates) / float64(all)
			}
			fmt.Fprintf(&b, "; %d duplicate deliveries suppressed (%.2f%% of the consumer's deliveries since it started)", d.Duplicates, rate)
		} else {
			b.WriteString("; duplicate deliveries not measured (give the consumers' /metrics)")
		}
		b.WriteString("; 0 duplicate effects possible (one key record per message, committed with its effect)")
		if row.Latency.Count > 0 {
			fmt.Fprintf(&b, "; enqueue → applied p50 %s, p99 %s", human(row.Latency.P50), human(row.Latency.P99))
		}
		b.WriteString(".\n")
	}
	for _, bl := range r.Blind {
		fmt.Fprintf(&b, "%s: not audited: %s.\n", bl.Consumer, bl.Reason)
	}
	return b.String()
}

// WriteText writes the report as an operator reads it: the table of rows, the
// blind consumers, the repairs and the sentence.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "audit of messages published %s .. %s (grace %s): %d rows read in %d pages\n\n",
		r.From.UTC().Format(time.RFC3339), r.To.UTC().Format(time.RFC3339), human(r.Grace), r.Scanned, r.Pages)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tCONSUMER\tPUBLISHED\tAPPLIED\tDEAD-LETTERED\tMISSING\tIN FLIGHT\tREPUBLISHED\tP50\tP99\tMAX")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", row.Topic, row.Consumer, row.Published, row.Applied,
			row.DeadLettered, row.Missing, row.InFlight, row.Republished, human(row.Latency.P50), human(row.Latency.P99), human(row.Latency.Max))
	}
	tw.Flush()
	for _, row := range r.Rows {
		if len(row.MissingIDs) > 0 {
			fmt.Fprintf(&b, "\nmissing at %s (%s): %s", row.Consumer, row.Topic, strings.Join(row.MissingIDs, ", "))
			if int64(len(row.MissingIDs)) < row.Missing {
				fmt.Fprintf(&b, ", … (%d in all)", row.Missing)
			}
			b.WriteString("\n")
		}
	}
	if len(r.Repaired) > 0 {
		fmt.Fprintf(&b, "\nrepaired: %d messages republished under their ids\n", len(r.Repaired))
		for _, rp := range r.Repaired {
			fmt.Fprintf(&b, "  %s (%s) row %d → copy %d, for %s\n", rp.MsgID, rp.Topic, rp.OrigID, rp.CopyID, strings.Join(rp.Consumers, ", "))
		}
	}
	if r.Truncated {
		b.WriteString("\nthe run stopped before the end of its window: the counts are of the rows read\n")
	}
	b.WriteString("\n")
	b.WriteString(r.Sentence())
	_, err := io.WriteString(w, b.String())
	return err
}

// human prints a duration rounded to what a reader needs.
func human(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String()
	case d < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}
