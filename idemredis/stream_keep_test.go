package idemredis_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/internal/testsvc"
)

// streamKeepMinIdle is the MinIdle of the tests of the source's idle resets: a
// delivery must outlive it several times over, and the resets (every third of
// it) must beat it on a loaded machine.
const streamKeepMinIdle = 3 * time.Second

// TestStreamHeldIsKept: an entry handed out and not yet settled is kept from the
// other sources of the group (their XAUTOCLAIM) while it is held past twice
// MinIdle, by the resets of its idle time; after its ack nothing is pending.
func TestStreamHeldIsKept(t *testing.T) {
	t.Parallel()
	b := streamSetup(t)
	idemtest.HeldIsKept(t, idemtest.BrokerEnv{Topic: b.stream, Sink: b.sink, Redelivery: streamKeepMinIdle,
		NewSource: func(t *testing.T) idem.Source {
			return b.source(t, idemredis.StreamSourceConfig{MinIdle: streamKeepMinIdle})
		}})
	if n := b.pendingCount(t); n != 0 {
		t.Errorf("%d entries pending after the held entry's ack, want none", n)
	}
}

// TestStreamMaxExtension: an entry unsettled past MaxExtension is no longer kept:
// another source reclaims it after MinIdle, and the holder's log says why.
func TestStreamMaxExtension(t *testing.T) {
	t.Parallel()
	b := streamSetup(t)
	logs := &testsvc.Buffer{}
	streamPublish(t, b.sink, idem.Message{ID: "slow", Topic: b.stream})
	holder := b.source(t, idemredis.StreamSourceConfig{Consumer: "holder", MaxExtension: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	first := streamReceive(t, holder, 1)
	again := streamReceive(t, b.source(t, idemredis.StreamSourceConfig{Consumer: "rival"}), 1)
	if again[0].Position != first[0].Position || again[0].Attempt != 2 {
		t.Fatalf("the rival got %s (attempt %d), want %s's second delivery", again[0].Position, again[0].Attempt, first[0].Position)
	}
	streamAck(t, again...)
	if !strings.Contains(logs.String(), "after StreamSourceConfig.MaxExtension") {
		t.Errorf("the holder's log does not say it let go of the entry:\n%s", logs.String())
	}
}
