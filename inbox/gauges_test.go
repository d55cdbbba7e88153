package inbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/inbox"
)

// gaugeValue reads the series of gauge name for consumer, if there is one.
func gaugeValue(t *testing.T, reg prometheus.Gatherer, name, consumer string) (float64, bool) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "consumer" && lp.GetValue() == consumer {
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// waitGauge waits until gauge name of consumer reads want.
func waitGauge(t *testing.T, reg prometheus.Gatherer, name, consumer string, want float64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s{consumer=%q} = %v", name, consumer, want), func() bool {
		got, ok := gaugeValue(t, reg, name, consumer)
		return ok && got == want
	})
}

// TestOpenDeadLettersGauge: idem_inbox_dead_letters_open follows the open dead
// letters of its consumer: counted soon after the consumer dead-letters and after
// it replays (with a GaugeInterval too long to do it), and at start and every
// GaugeInterval for what another process closed (an operator's discard).
func TestOpenDeadLettersGauge(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, b bundle) {
		const name, consumer = "idem_inbox_dead_letters_open", "open-gauge"
		var fixed atomic.Bool // the handler refuses every message until set
		h := func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
			if !fixed.Load() {
				return inbox.Permanent(errors.New("cannot apply yet"))
			}
			return credit(ctx, tx, m)
		}
		fb := newFakeBroker()
		reg := prometheus.NewRegistry()
		c := newConsumer(t, b, fb, h, inbox.Config{Consumer: consumer, Registerer: reg, GaugeInterval: time.Hour})
		stop := runConsumer(t, c)
		waitGauge(t, reg, name, consumer, 0) // counted at start
		publishOrders(fb, 3, 1)
		waitGauge(t, reg, name, consumer, 3) // after dead-lettering

		stop()

		// A consumer whose start count has run, and that has nothing pending to
		// count: only its replay can bring the gauge down.
		reg = prometheus.NewRegistry()
		c = newConsumer(t, b, fb, h, inbox.Config{Consumer: consumer, Registerer: reg, GaugeInterval: time.Hour})
		stop = runConsumer(t, c)
		waitGauge(t, reg, name, consumer, 3)
		ids := deadLetterIDs(t, c, 3)
		fixed.Store(true)
		if applied, err := c.Replay(context.Background(), ids["order-00000"]); err != nil || !applied {
			t.Fatalf("Replay = %v, %v; want applied", applied, err)
		}
		waitGauge(t, reg, name, consumer, 2) // after the replay
		stop()

		// A discard is another process's write: the periodic count sees it.
		a := inbox.NewDeadLetterAdmin(b.txdb)
		if err := a.Discard(context.Background(), ids["order-00001"], "spam"); err != nil {
			t.Fatal(err)
		}
		reg = prometheus.NewRegistry()
		c = newConsumer(t, b, fb, h, inbox.Config{Consumer: consumer, Registerer: reg, GaugeInterval: 5 * time.Millisecond})
		runConsumer(t, c)
		waitGauge(t, reg, name, consumer, 1)
		if err := a.Discard(context.Background(), ids["order-00002"], "spam"); err != nil {
			t.Fatal(err)
		}
		waitGauge(t, reg, name, consumer, 0)
	})
}

// deadLetterIDs returns the ids of c's n open dead letters by message id.
func deadLetterIDs(t *testing.T, c *inbox.Consumer[*sql.Tx], n int) map[string]int64 {
	t.Helper()
	dls, err := c.DeadLetters(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int64{}
	for _, dl := range dls {
		ids[dl.Message.ID] = dl.ID
	}
	if len(ids) != n {
		t.Fatalf("%d open dead letters, want %d", len(ids), n)
	}
	return ids
}

// lagBroker is a fakeBroker that reports the lag the test sets.
type lagBroker struct {
	*fakeBroker
	mu    sync.Mutex
	lag   idem.Lag
	err   error
	calls atomic.Int64
}

var _ idem.LagReporter = (*lagBroker)(nil)

func (b *lagBroker) Lag(context.Context) (idem.Lag, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls.Add(1)
	return b.lag, b.err
}

func (b *lagBroker) set(lag int64, err error) {
	b.mu.Lock()
	b.lag, b.err = idem.Lag{Messages: lag}, err
	b.mu.Unlock()
}

// lockedBuffer is a log sink safe for the consumer's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *lockedBuffer) count(s string) int { return strings.Count(b.String(), s) }

// TestLagGauge: with a Source that reports lag, idem_inbox_lag_messages follows
// what it reports; a failing Lag leaves the gauge at its last value and is logged
// once however often it fails the same way, and its recovery once. A Source that
// does not report lag has no such series.
func TestLagGauge(t *testing.T) {
	t.Parallel()
	const name, consumer = "idem_inbox_lag_messages", "lag-gauge"
	b := sqliteBundle(t)
	src := &lagBroker{fakeBroker: newFakeBroker()}
	src.set(7, nil)
	reg := prometheus.NewRegistry()
	logs := &lockedBuffer{}
	c := newConsumer(t, b, src, credit, inbox.Config{Consumer: consumer, Registerer: reg, GaugeInterval: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	runConsumer(t, c)
	waitGauge(t, reg, name, consumer, 7)
	src.set(42, nil)
	waitGauge(t, reg, name, consumer, 42)

	src.set(0, errors.New("broker unreachable"))
	from := src.calls.Load()
	waitFor(t, "five failed Lag calls", func() bool { return src.calls.Load() >= from+5 })
	if got, _ := gaugeValue(t, reg, name, consumer); got != 42 {
		t.Errorf("after failed Lag calls the gauge reads %v, want its last value 42", got)
	}
	if n := logs.count("reading a gauge failed"); n != 1 {
		t.Errorf("%d warnings for five failures of one error, want 1:\n%s", n, logs)
	}
	src.set(0, nil)
	waitGauge(t, reg, name, consumer, 0)
	if n := logs.count("reading a gauge works again"); n != 1 {
		t.Errorf("%d notes of the recovery, want 1", n)
	}

	plainReg := prometheus.NewRegistry()
	plain := newConsumer(t, b, newFakeBroker(), credit, inbox.Config{Consumer: "no-lag", Registerer: plainReg, GaugeInterval: time.Millisecond})
	runConsumer(t, plain)
	waitGauge(t, plainReg, "idem_inbox_dead_letters_open", "no-lag", 0) // its gauge loop has run
	if v, ok := gaugeValue(t, plainReg, name, "no-lag"); ok {
		t.Errorf("a source without Lag exports %s = %v, want no series", name, v)
	}
}
