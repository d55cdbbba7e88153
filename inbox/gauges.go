package inbox

import (
	"context"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
)

// The gauges Run keeps: idem_inbox_dead_letters_open, counted from the
// dead-letter table, and idem_inbox_lag_messages, asked of a Source that is an
// idem.LagReporter. Both are read on Run's own schedule (Config.GaugeInterval,
// and a recount soon after the consumer dead-letters or replays), never on the
// scrape path and never per message, each read bounded by gaugeTimeout. A read
// that fails leaves its gauge at its last value and is logged when its error
// changes.
const (
	// gaugeTimeout bounds one count of open letters, and one Lag call.
	gaugeTimeout = 10 * time.Second
	// maxOpenCount is where the count of open letters stops: past it the table
	// needs an operator, not a more exact gauge.
	maxOpenCount = 100_000
	// recountSpacing is the least time between two counts that dead letters
	// written or closed ask for: a storm of dead letters costs one count a
	// second, not one per batch.
	recountSpacing = time.Second
)

// deadLettersChanged asks Run's gauge loop to count the open dead letters again;
// it never blocks, and requests made while one waits are one request.
func (c *Consumer[Tx]) deadLettersChanged() {
	select {
	case c.recount <- struct{}{}:
	default:
	}
}

// gaugeReads remembers the last error of each read, to log each change once.
type gaugeReads struct {
	count, lag string
}

// watchGauges refreshes the gauges at once, then every Config.GaugeInterval and
// when deadLettersChanged asks, until ctx ends.
func (c *Consumer[Tx]) watchGauges(ctx context.Context) {
	lr, _ := c.src.(idem.LagReporter)
	var last gaugeReads
	c.countOpen(ctx, &last)
	c.readLag(ctx, lr, &last)
	t := time.NewTicker(c.cfg.GaugeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.countOpen(ctx, &last)
			c.readLag(ctx, lr, &last)
		case <-c.recount:
			c.countOpen(ctx, &last)
			select { // spaced out; the ticker's reads wait meanwhile, none is lost for long
			case <-ctx.Done():
				return
			case <-time.After(recountSpacing):
			}
		}
	}
}

// countOpen sets idem_inbox_dead_letters_open from the table.
func (c *Consumer[Tx]) countOpen(ctx context.Context, last *gaugeReads) {
	if c.metrics == nil {
		return
	}
	n, err := c.countOpenLetters(ctx)
	c.logChange(ctx, &last.count, "idem_inbox_dead_letters_open", err) // before the gauge: whoever sees the value sees the note
	if err == nil {
		c.metrics.OpenDeadLetters(n)
	}
}

// readLag sets idem_inbox_lag_messages from the source, if it reports lag.
func (c *Consumer[Tx]) readLag(ctx context.Context, lr idem.LagReporter, last *gaugeReads) {
	if lr == nil || c.metrics == nil {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, gaugeTimeout)
	lag, err := lr.Lag(lctx)
	cancel()
	c.logChange(ctx, &last.lag, "idem_inbox_lag_messages", err) // before the gauge, as in countOpen
	if err == nil {
		c.metrics.Lag(lag.Messages)
	}
}

// logChange logs err when it differs from the gauge's last one, and the recovery
// when a read succeeds after one failed.
func (c *Consumer[Tx]) logChange(ctx context.Context, last *string, gauge string, err error) {
	if ctx.Err() != nil {
		return // Run is ending: the failure is the cancellation
	}
	now := ""
	if err != nil {
		now = err.Error()
	}
	switch {
	case now == *last:
	case err != nil:
		c.cfg.Logger.WarnContext(ctx, "inbox: reading a gauge failed; it keeps its last value", "consumer", c.cfg.Consumer,
			"gauge", gauge, "err", err)
	default:
		c.cfg.Logger.InfoContext(ctx, "inbox: reading a gauge works again", "consumer", c.cfg.Consumer, "gauge", gauge)
	}
	*last = now
}

// countOpenLetters counts this consumer's open dead letters (neither replayed nor
// discarded), up to maxOpenCount, giving up after gaugeTimeout.
func (c *Consumer[Tx]) countOpenLetters(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, gaugeTimeout)
	defer cancel()
	var n int64
	err := read(ctx, c.db, func(q idemsql.Querier) error {
		return q.QueryRow(ctx, c.sql.CountOpenDeadLetters, c.cfg.Consumer, maxOpenCount).Scan(&n)
	})
	if err != nil {
		return 0, &idem.BackendError{Backend: c.db.Dialect().String(), Op: "inbox.count_dead_letters", Err: err}
	}
	return n, nil
}
