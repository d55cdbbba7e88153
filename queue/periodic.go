package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/metrics"
)

// Periodic is a schedule whose messages Queue.Run enqueues: one per tick, once,
// however many processes run it. A tick is a time the schedule names (10:05:00
// for "*/5 * * * *"); the process that first moves the schedule's row in
// idem_queue_periodic to that tick enqueues its message in the same transaction,
// and the others find the row moved and enqueue nothing. Ticks missed while no
// process ran are not made up: the next one runs.
type Periodic struct {
	// Name identifies the schedule across processes and restarts: its row, and
	// its messages' IDs. Required; at most 200 bytes.
	Name string
	// Schedule is a cron expression of five fields (minute hour day-of-month
	// month day-of-week, "*/5 * * * *"), a descriptor (@hourly, @daily,
	// @weekly, @monthly, @yearly), or @every with a duration of at least a
	// second ("@every 30s"), whose ticks are the multiples of the duration since
	// the Unix epoch, the same in every process. Times are UTC.
	Schedule string
	// Message returns the message of the tick. Its ID defaults to
	// "periodic:NAME:TICK" (TICK in Unix milliseconds); its Topic is required.
	Message func(tick time.Time) idem.Message
}

// schedule is a parsed Periodic: the first tick after a time.
type schedule interface{ Next(time.Time) time.Time }

// every ticks at the multiples of d since the Unix epoch.
type every time.Duration

func (e every) Next(t time.Time) time.Time {
	d := time.Duration(e)
	return t.Truncate(d).Add(d)
}

// parseSchedule parses a Periodic's Schedule.
func parseSchedule(spec string) (schedule, error) {
	if rest, ok := strings.CutPrefix(spec, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil {
			return nil, err
		}
		if d < time.Second {
			return nil, fmt.Errorf("@every %v is below a second", d)
		}
		return every(d), nil
	}
	return parseCron(spec)
}

// parseCron parses a cron expression. robfig/cron v3.0.1 panics on some
// (an index out of range on "TZ=" with nothing after it): a bad Schedule is the
// caller's InputError, never a crash of the process that reads it.
func parseCron(spec string) (s schedule, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("not a cron expression (the parser failed: %v)", r)
		}
	}()
	return cron.ParseStandard(spec)
}

// maxPeriodicName bounds Periodic.Name: the message IDs it makes stay keys.
const maxPeriodicName = 200

func checkPeriodic(ps []Periodic) error {
	seen := map[string]bool{}
	for i, p := range ps {
		field := "Config.Periodic[" + strconv.Itoa(i) + "]"
		switch {
		case p.Name == "" || len(p.Name) > maxPeriodicName:
			return &idem.InputError{Field: field + ".Name", Reason: fmt.Sprintf("must be 1 to %d bytes (got %d)", maxPeriodicName, len(p.Name)), Fix: "name the schedule, such as \"nightly-report\""}
		case seen[p.Name]:
			return &idem.InputError{Field: field + ".Name", Reason: fmt.Sprintf("%q names two schedules", p.Name), Fix: "give each schedule its own name"}
		case p.Message == nil:
			return &idem.InputError{Field: field + ".Message", Reason: "is nil", Fix: "return the message of a tick"}
		}
		seen[p.Name] = true
		s, err := parseSchedule(p.Schedule)
		if err == nil && s.Next(time.Now()).IsZero() {
			// Such as "0 0 30 2 *": Run would find its next tick due at once, forever.
			err = errors.New("it names no time in the next five years")
		}
		if err != nil {
			return &idem.InputError{Field: field + ".Schedule", Reason: fmt.Sprintf("%q: %v", p.Schedule, err),
				Fix: `use five cron fields ("*/5 * * * *"), @hourly/@daily/@weekly/@monthly/@yearly, or "@every 30s"`}
		}
	}
	return nil
}

// ErrTickTaken is returned by EnqueueTick when the tick was enqueued already
// (by this or another process) or a later one was.
var ErrTickTaken = errors.New("queue: the tick was enqueued already")

// EnqueueTick enqueues p's message of tick unless some process did: it moves
// p's row to tick and enqueues in one transaction. It returns ErrTickTaken
// when the row was at tick or past it. Run calls it at each tick; it is
// exported for tests and for schedulers of one's own.
func (q *Queue[Tx]) EnqueueTick(ctx context.Context, p Periodic, tick time.Time) (Enqueued, error) {
	if err := checkPeriodic([]Periodic{p}); err != nil {
		return Enqueued{}, err
	}
	m := p.Message(tick)
	if m.ID == "" {
		m.ID = "periodic:" + p.Name + ":" + strconv.FormatInt(tick.UnixMilli(), 10)
	}
	var res Enqueued
	err := q.db.InTx(ctx, func(tx Tx) error {
		qr := q.db.Querier(tx)
		if _, err := qr.Exec(ctx, q.stmts.PeriodicEnsure, p.Name); err != nil {
			return &idem.BackendError{Backend: q.db.Dialect().String(), Op: "queue.periodic", Err: err}
		}
		n, err := qr.Exec(ctx, q.stmts.PeriodicAdvance, tick.UnixMilli(), p.Name)
		if err != nil {
			return &idem.BackendError{Backend: q.db.Dialect().String(), Op: "queue.periodic", Err: err}
		}
		if n == 0 {
			return ErrTickTaken
		}
		out, err := q.InsertTx(ctx, tx, Job{Message: m})
		if err != nil {
			return err
		}
		res = out[0]
		return nil
	})
	return res, err
}

// SweepInterval is how often Run deletes finished messages past the
// retention, SweepBatch rows a statement.
const (
	SweepInterval = time.Minute
	SweepBatch    = 1000
)

// Run enqueues the periodic schedules' messages at their ticks and deletes
// finished messages past Config.Retention, until ctx ends; it returns ctx's
// error. Run it in one process or in all: each tick is enqueued once, and
// sweeping twice deletes nothing twice. A failed tick or sweep is logged and
// tried again at the next.
func (q *Queue[Tx]) Run(ctx context.Context) error {
	type sched struct {
		p    Periodic
		s    schedule
		next time.Time
	}
	now := q.cfg.Now().UTC()
	ss := make([]sched, len(q.cfg.Periodic))
	for i, p := range q.cfg.Periodic {
		s, _ := parseSchedule(p.Schedule) // checked by New
		ss[i] = sched{p: p, s: s, next: s.Next(now)}
	}
	sweepAt, gaugeAt := now, now
	gauges := gaugeTopics{}
	for {
		now = q.cfg.Now().UTC()
		if !now.Before(sweepAt) {
			q.sweep(ctx, now)
			sweepAt = now.Add(SweepInterval)
		}
		wake := sweepAt
		if q.m != nil {
			if !now.Before(gaugeAt) {
				q.gauge(ctx, gauges)
				gaugeAt = now.Add(q.cfg.GaugeInterval)
			}
			wake = minTime(wake, gaugeAt)
		}
		for i := range ss {
			if !now.Before(ss[i].next) {
				tick := latestTick(ss[i].s, ss[i].next, now)
				_, err := q.EnqueueTick(ctx, ss[i].p, tick)
				switch {
				case err == nil:
					q.m.Periodic(ss[i].p.Name, "enqueued")
				case errors.Is(err, ErrTickTaken):
					q.m.Periodic(ss[i].p.Name, "taken")
				case ctx.Err() == nil:
					q.m.Periodic(ss[i].p.Name, "failed")
					q.cfg.Logger.WarnContext(ctx, "queue: enqueueing a periodic tick failed; the next tick is tried", "schedule", ss[i].p.Name, "tick", tick, "err", err)
				}
				ss[i].next = ss[i].s.Next(now)
			}
			wake = minTime(wake, ss[i].next)
		}
		t := time.NewTimer(max(wake.Sub(q.cfg.Now()), time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// latestTick returns the last tick of s at or before now, starting from tick
// next (due): after a pause or a clock jump, the current tick, not the first
// one missed (missed ticks are not made up). It walks at most maxTickWalk
// ticks, and past that takes the last one it reached.
func latestTick(s schedule, next, now time.Time) time.Time {
	for range maxTickWalk {
		n := s.Next(next)
		if n.IsZero() || n.After(now) {
			break
		}
		next = n
	}
	return next
}

// maxTickWalk bounds latestTick's walk (a day of minutes is 1,440).
const maxTickWalk = 10_000

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// sweep deletes finished messages older than the retention, a batch at a time.
func (q *Queue[Tx]) sweep(ctx context.Context, now time.Time) {
	before := now.Add(-q.cfg.Retention).UnixMilli()
	for ctx.Err() == nil {
		var n int64
		err := q.db.Auto(ctx, func(qr idemsql.Querier) error {
			var err error
			n, err = qr.Exec(ctx, q.stmts.Sweep, before, SweepBatch)
			return err
		})
		if err != nil {
			if ctx.Err() == nil {
				q.cfg.Logger.WarnContext(ctx, "queue: sweeping finished messages failed; tried again later", "err", err)
			}
			return
		}
		q.m.Swept(n)
		if n < SweepBatch {
			return
		}
	}
}

// gaugeTopics are the topics the gauges were last set for.
type gaugeTopics map[string]bool

// gauge sets the gauges of the messages per topic and state from Status; a
// topic listed before and drained since is set to 0. A failed read is logged
// and the gauges keep their values until the next.
func (q *Queue[Tx]) gauge(ctx context.Context, last gaugeTopics) {
	st, err := q.Status(ctx)
	if err != nil {
		if ctx.Err() == nil {
			q.cfg.Logger.WarnContext(ctx, "queue: counting the messages for the gauges failed; tried again later", "err", err)
		}
		return
	}
	topics := make([]metrics.QueueTopic, len(st))
	seen := make(map[string]bool, len(st))
	for i, t := range st {
		topics[i] = metrics.QueueTopic{Topic: t.Topic, Ready: t.Ready, Running: t.Running, Retrying: t.Retrying,
			Scheduled: t.Scheduled, OldestReadySeconds: t.OldestReadyAge.Seconds()}
		seen[t.Topic] = true
	}
	var gone []string
	for t := range last {
		if !seen[t] {
			gone = append(gone, t)
		}
	}
	q.m.Topics(topics, gone)
	for _, t := range gone {
		delete(last, t)
	}
	for t := range seen {
		last[t] = true
	}
}
