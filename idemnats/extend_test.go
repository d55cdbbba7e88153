package idemnats_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/nats-io/nats.go/jetstream"
)

// extendAckWait is the AckWait of the tests of the source's in-progress acks: a
// delivery must outlive it several times over, and the source's acks (every
// third of it) must beat it on a loaded machine.
const extendAckWait = 3 * time.Second

// TestUnsettledDeliveryIsKept: a delivery handed out and not yet settled is kept
// from redelivery by the source's in-progress acks while it is held past twice
// its AckWait (a slow handler, an inbox batch run again after a database
// failure); after its Ack the consumer has redelivered nothing.
func TestUnsettledDeliveryIsKept(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	stream, prefix := newStream(t, js)
	cfg := idemnats.SourceConfig{Stream: stream, Durable: "held", AckWait: extendAckWait}
	idemtest.HeldIsKept(t, idemtest.BrokerEnv{Topic: prefix + ".orders", Sink: newSink(t, js, idemnats.SinkConfig{}),
		NewSource: func(t *testing.T) idem.Source { return openSource(t, js, cfg) }, Redelivery: extendAckWait})
	if info := consumerInfo(t, js, stream, "held"); info.NumRedelivered != 0 || info.NumAckPending != 0 {
		t.Errorf("after the held delivery's ack the consumer has %d redelivered and %d unacknowledged, want none",
			info.NumRedelivered, info.NumAckPending)
	}
}

// TestPausedRenewalsLoseTheDelivery: a source whose renewals are paused, as a
// paused process's are, loses its unsettled delivery to a competing source after
// AckWait; and one held past MaxExtension is let go, with a warning naming it.
func TestPausedRenewalsLoseTheDelivery(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	for _, tc := range []struct {
		name  string
		cfg   idemnats.SourceConfig
		pause bool
		warn  string
	}{
		{"paused", idemnats.SourceConfig{}, true, ""},
		{"past MaxExtension", idemnats.SourceConfig{MaxExtension: time.Millisecond}, false, "after SourceConfig.MaxExtension"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stream, prefix := newStream(t, js)
			logs := &testsvc.Buffer{}
			cfg := tc.cfg
			cfg.Stream, cfg.Durable, cfg.AckWait, cfg.Logger = stream, "held", extendAckWait, slog.New(slog.NewTextHandler(logs, nil))
			src, rival := openSource(t, js, cfg), openSource(t, js, cfg)
			publish(t, newSink(t, js, idemnats.SinkConfig{}), hundred(prefix)[:1]...)
			if tc.pause {
				defer src.PauseRenewals()()
			}
			d := receiveN(t, src, 1)[0]
			again := receiveN(t, rival, 1) // within the suite's wait, after AckWait
			if again[0].ID != d.ID || again[0].Attempt != 2 {
				t.Fatalf("the rival got %s (attempt %d), want %s's second delivery", again[0].ID, again[0].Attempt, d.ID)
			}
			ackAll(t, again...)
			if tc.warn != "" && !strings.Contains(logs.String(), tc.warn) {
				t.Errorf("no warning %q in the source's log:\n%s", tc.warn, logs.String())
			}
		})
	}
}

func consumerInfo(t *testing.T, js jetstream.JetStream, stream, durable string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx := context.Background()
	cons, err := js.Consumer(ctx, stream, durable)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}
