package verify

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/internal/wait"
	"github.com/idemhq/idem/outbox"
)

// The outbox → broker boundary: a supervised relay, restarted after each crash.

func (r *run) superviseRelay(ctx context.Context) {
	if r.f.CDC != nil {
		r.superviseCDC(ctx)
		return
	}
	r.supervise(ctx, "relay", func(s idem.Sink) idem.Sink { return s }, func(rctx context.Context, sink idem.Sink) error {
		relay, err := r.ob.Relay(sink, outbox.RelayConfig{
			BatchSize: 100, PollInterval: 20 * time.Millisecond, MaxAttempts: 1000,
			Backoff: func(int) time.Duration { return 20 * time.Millisecond },
			Logger:  r.log,
		})
		if err != nil {
			return err
		}
		return relay.Run(rctx)
	})
}

// supervise runs a relay (run) until ctx ends, restarted after each crash, as a
// supervised relay process would be: each incarnation gets a fresh broker sink,
// wrapped by the broker's loss (Flow.BrokerLoss), by wrap and then by the run's
// fault injector, which kills it (cancels its context) on a relay crash and cuts
// its broker connection on a broker cut.
func (r *run) supervise(ctx context.Context, what string, wrap func(idem.Sink) idem.Sink, run func(rctx context.Context, sink idem.Sink) error) {
	faults := []chaos.Fault{{Kind: chaos.FaultRelayCrash, Weight: 2}, {Kind: chaos.FaultPublishError, Weight: 1}}
	if r.f.Broker.Proxy() != nil {
		faults = append(faults, chaos.Fault{Kind: FaultBrokerCut, Weight: 0.3})
	}
	for first := true; ctx.Err() == nil; first = false {
		if !first {
			r.restarts.Add(1)
		}
		rctx, kill := context.WithCancel(ctx)
		sink, err := r.f.Broker.OpenSink(rctx)
		if err != nil {
			r.log.Warn("verify: open sink", "err", err)
			kill()
			wait.Sleep(ctx, 100*time.Millisecond)
			continue
		}
		// The broker's loss is below the injector: the relay and its faults see
		// every publish acknowledged.
		var inner idem.Sink = sink
		if r.losses != nil {
			inner = lossSink{sink, r.losses}
		}
		cs := &chaos.Sink{Sink: wrap(inner), Injector: r.inj, Faults: faults, Kill: kill, OnFault: r.onFault, Tally: &r.published, Sent: &r.sent}
		err = run(rctx, cutSink{cs, r})
		kill()
		if err != nil && ctx.Err() == nil && rctx.Err() == nil {
			r.log.Warn("verify: "+what+" stopped", "err", err)
			r.noteStop()
			wait.Sleep(ctx, 50*time.Millisecond)
		}
		if c, ok := sink.(io.Closer); ok {
			_ = c.Close()
		}
	}
}

// cutSink turns the broker cut fault of a publish into a real cut.
type cutSink struct {
	s *chaos.Sink
	r *run
}

func (c cutSink) Publish(ctx context.Context, msgs ...idem.Message) error {
	err := c.s.Publish(ctx, msgs...)
	if err == nil {
		return nil
	}
	if errors.Is(err, chaos.ErrInjected) {
		return err
	}
	// A failure of the broker connection: start over on a fresh one, as a
	// supervised relay process would.
	c.s.Kill()
	return err
}
