package idemtest

import (
	"context"
	"testing"
	"time"

	"github.com/idemhq/idem"
)

// testBrokerLag runs where the source is an idem.LagReporter. N messages published
// to a fresh topic before its consumer read any: Lag reaches N (exactly N unless
// the env says the adapter's counts are approximate, LagApproximate: then at least
// N). Once all are received and acknowledged, Lag comes back to 0. Both are polled
// by progress, within the suite's redelivery bound, never timed.
func testBrokerLag(t *testing.T, env BrokerEnv) {
	const n = 7
	probe := env.NewSource(t)
	lr, ok := probe.(idem.LagReporter)
	if !ok {
		t.Skip("the source does not report its lag (idem.LagReporter)")
	}
	msgs := make([]idem.Message, n)
	for i := range msgs {
		msgs[i] = brokerMsg(env, i)
	}
	Publish(t, env.Sink, msgs...)
	want := "exactly"
	if env.LagApproximate {
		want = "at least"
	}
	last := awaitLag(t, env, lr, func(m int64) bool {
		if env.LagApproximate {
			return m >= n
		}
		return m == n
	})
	if last < n || (!env.LagApproximate && last != n) {
		t.Fatalf("with %d messages published and none received, Lag = %d; want %s %d", n, last, want, n)
	}
	var got []idem.Delivery
	for len(got) < n { // one receive at a time, acknowledged before the next (FIFO groups)
		batch := n - len(got)
		if env.InFlightPerKey > 0 {
			batch = min(batch, env.InFlightPerKey)
		}
		ds := Receive(t, probe, batch, env.wait())
		if len(ds) == 0 {
			break
		}
		Ack(t, ds...)
		got = append(got, ds...)
	}
	if len(got) != n {
		t.Fatalf("received %d of %d messages", len(got), n)
	}
	if last := awaitLag(t, env, lr, func(m int64) bool { return m == 0 }); last != 0 {
		t.Fatalf("after all %d messages were acknowledged, Lag = %d; want 0", n, last)
	}
}

// awaitLag asks for the lag until done holds or the suite's redelivery bound
// passes, and returns the last value. An error fails t.
func awaitLag(t *testing.T, env BrokerEnv, lr idem.LagReporter, done func(int64) bool) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), env.wait())
	defer cancel()
	last := int64(-1)
	for {
		lag, err := lr.Lag(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return last // the bound passed during the call
			}
			t.Fatalf("Lag: %v", err)
		}
		last = lag.Messages
		if done(last) {
			return last
		}
		select {
		case <-ctx.Done():
			return last
		case <-time.After(50 * time.Millisecond):
		}
	}
}
