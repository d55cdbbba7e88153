package idemtest

import (
	"testing"
	"time"

	"github.com/idemhq/idem"
)

// testBrokerDeadline: the Idem-Deadline header arrives unchanged, to the
// nanosecond, so the inbox refuses a message past the deadline its sender set
// (outbox.WithDeadline) and applies one within it.
func testBrokerDeadline(t *testing.T, env BrokerEnv) {
	deadline := time.Date(2026, 11, 26, 20, 30, 0, 123456789, time.UTC)
	m := brokerMsg(env, 0)
	m.Headers[idem.HeaderDeadline] = idem.FormatDeadline(deadline)
	Publish(t, env.Sink, m)
	d := ReceiveN(t, env.NewSource(t), 1)[0]
	defer Ack(t, d)
	v, ok := d.Headers[idem.HeaderDeadline]
	if !ok {
		t.Fatalf("header %s did not arrive (headers: %v)", idem.HeaderDeadline, d.Headers)
	}
	got, err := idem.ParseDeadline(v)
	if err != nil || !got.Equal(deadline) {
		t.Fatalf("header %s arrived as %q (%v, %v), want %s", idem.HeaderDeadline, v, got, err, idem.FormatDeadline(deadline))
	}
}
