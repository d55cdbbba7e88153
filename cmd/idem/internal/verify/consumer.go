package verify

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/wait"
)

// The broker → consumer → ledger boundary: supervised consumers applying each
// order to the ledger through the inbox.

// inboxConfig is the consumers' inbox configuration, judging on now (nil: the
// wall clock).
func (r *run) inboxConfig(now func() time.Time) inbox.Config {
	return inbox.Config{Now: now,
		Consumer: consumerName, BatchSize: 32, MaxAttempts: 100, Retention: r.f.Retention,
		Backoff:    func(int) time.Duration { return 20 * time.Millisecond },
		Registerer: r.reg, Logger: r.log,
		// Deadlines are judged on the consumer's own clock (the wall clock, off by
		// the consumer's skew with Flow.Skew; the message ids are UUIDv7s minted
		// on the wall clock, so their ages are judged on it too). Without idem, a message past its deadline is applied all the same.
		IgnoreDeadlines: r.f.Unsafe,
	}
}

// ledger applies one order: a ledger entry and the running balance.
func (r *run) ledger(ctx context.Context, tx *sql.Tx, m idem.Message) error {
	var ev orderEvent
	if err := json.Unmarshal(m.Payload, &ev); err != nil || ev.OrderID == "" {
		return inbox.Permanent(fmt.Errorf("payload: want {\"order_id\", \"amount\"}: %v", err))
	}
	q := r.txdb.Querier(tx)
	if _, err := q.Exec(ctx, "INSERT INTO "+tableLedger+" (order_id, amount, applied_at) VALUES ($1, $2, $3)",
		ev.OrderID, ev.Amount, r.now().UnixNano()); err != nil {
		return err
	}
	if _, err := q.Exec(ctx, "UPDATE "+tableBalance+" SET total = total + $1 WHERE id = 1", ev.Amount); err != nil {
		return err
	}
	if _, err := q.Exec(ctx, r.insertIgnore(tableUnpaid), ev.OrderID); err != nil {
		return err
	}
	return r.push.appendTx(ctx, tx, ev)
}

// consumerClock numbers a consumer process slot and returns its clock: the wall
// clock, off by the slot's skew with Flow.Skew (the same across restarts: the
// same node).
func (r *run) consumerClock() (slot int, now func() time.Time) {
	slot = int(r.consumerSlots.Add(1))
	if r.f.Skew == 0 {
		return slot, nil
	}
	off := r.f.skewOffset(slot - 1)
	reads := "inbox: message deadlines and key ages"
	if r.queue != nil {
		reads += "; queue: run-at times and leases"
	}
	r.skewNode(fmt.Sprintf("consumer %d", slot), off, reads)
	return slot, wallAt(off)
}

func (r *run) superviseConsumer(ctx context.Context) {
	_, now := r.consumerClock()
	faults := []chaos.Fault{{Kind: chaos.FaultDuplicateDelivery, Weight: 3}}
	if c, ok := r.f.Broker.(CumulativeAcker); !ok || !c.CumulativeAcks() {
		faults = append(faults, chaos.Fault{Kind: chaos.FaultLostAck, Weight: 2})
	}
	if r.f.Broker.Proxy() != nil {
		// On the first delivery only: on RabbitMQ a cut redelivers the batch in
		// hand, whose deliveries would draw more cuts.
		faults = append(faults, chaos.Fault{Kind: FaultBrokerCut, Weight: 0.3, First: true})
	}
	// Min 1: a run kills (and pauses) at every point at least once, whatever
	// the draw: a batch is hit at a quarter of the rate, so a short run has few.
	batch := []chaos.Fault{{Kind: chaos.FaultCrashBeforeEffect, Weight: 1, Min: 1}, {Kind: chaos.FaultCrashAfterEffect, Weight: 1, Min: 1},
		{Kind: chaos.FaultCrashAfterCommit, Weight: 1, Min: 1}}
	if r.f.Consumers > 1 {
		batch = append(batch, chaos.Fault{Kind: chaos.FaultPaused, Weight: 0.3, Min: 1, Max: 3})
	}
	pause := r.f.Broker.AckWait() + 500*time.Millisecond
	k, keeps := r.f.Broker.(UnsettledKeeper)
	keeps = keeps && k.KeepsUnsettled()
	for first := true; ctx.Err() == nil; first = false {
		if !first {
			r.restarts.Add(1)
		}
		cctx, kill := context.WithCancel(ctx)
		src, err := r.f.Broker.OpenSource(cctx)
		if err != nil {
			r.log.Warn("verify: open source", "err", err)
			kill()
			wait.Sleep(ctx, 100*time.Millisecond)
			continue
		}
		cs := &chaos.Source{Source: src, Injector: r.inj, Faults: faults, BatchFaults: batch, BatchScale: 0.25, Kill: kill, Tally: &r.delivered, Firsts: &r.firsts,
			AckWait: r.f.Broker.AckWait(), KeepsUnsettled: keeps}
		c, err := inbox.New(cctx, cutSource{cs, r}, r.txdb, r.store, chaos.Handler(r.ledger, pause, kill), r.inboxConfig(now))
		if err == nil {
			err = c.Run(cctx)
		}
		kill()
		_ = src.Close()
		if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			r.log.Warn("verify: consumer stopped", "err", err)
			r.noteStop()
			wait.Sleep(ctx, 50*time.Millisecond)
		}
	}
}

// cutSource turns a broker cut fault chosen for a delivery into a real cut.
type cutSource struct {
	s *chaos.Source
	r *run
}

func (c cutSource) Receive(ctx context.Context, max int) ([]idem.Delivery, error) {
	ds, err := c.s.Receive(ctx, max)
	if err != nil && ctx.Err() == nil {
		// A broken broker connection (RabbitMQ's does not recover by itself):
		// start over on a fresh one, as a supervised consumer process would.
		c.s.Kill()
	}
	for i, d := range ds {
		if d.Headers[chaos.HeaderFault] == FaultBrokerCut {
			c.r.cut(c.r.f.Broker.Proxy(), FaultBrokerCut)
		}
		ds[i].Settler = countFailedAck{d.Settler, &c.r.acksFailed}
	}
	return ds, err
}

// countFailedAck counts the acks that return an error: the broker delivers each
// of those messages again (Report.AcksFailed).
type countFailedAck struct {
	idem.Settler
	failed *atomic.Int64
}

func (c countFailedAck) Ack(ctx context.Context) error {
	err := c.Settler.Ack(ctx)
	if err != nil {
		c.failed.Add(1)
	}
	return err
}

func (c cutSource) Close() error { return c.s.Close() }

// noDedup is the unsafe mode's store: every key is new, every time.
type noDedup struct{}

func (noDedup) ClaimTx(context.Context, *sql.Tx, idem.Claim) (idem.Result, error) {
	return idem.Result{Outcome: idem.Acquired, Token: 1}, nil
}
func (noDedup) CompleteTx(context.Context, *sql.Tx, idem.Key, uint64, []byte) error { return nil }
func (noDedup) ReleaseTx(context.Context, *sql.Tx, idem.Key, uint64) error          { return nil }

// emptySource lets inbox.New create its tables before the consumers start.
type emptySource struct{}

func (emptySource) Receive(ctx context.Context, _ int) ([]idem.Delivery, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (emptySource) Close() error { return nil }
