package idemredis

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/brokerkit"
	"github.com/redis/go-redis/v9"
)

// StreamSource is an idem.Source reading one Redis stream as one consumer of a
// consumer group. It is safe for concurrent use; Receive calls take turns.
//
// Receive first reclaims entries that have been pending for MinIdle or longer
// (XAUTOCLAIM): those of consumers that died or stalled, its own that were nak'ed
// or were held past MaxExtension. Then it reads new entries (XREADGROUP >), waiting at most Block
// at a time so that a cancelled ctx is noticed within Block. Ack is XACK.
//
// While a delivery is unsettled the source resets its entry's idle time every
// third of MinIdle (XCLAIM … IDLE 0 JUSTID, one command for all of them), up to
// StreamSourceConfig.MaxExtension (30 minutes), so no source of the group
// reclaims it from a slow handler or from an inbox batch run again after a
// database failure, while a consumer that dies or stalls loses its entries within
// about MinIdle. The first settle ends it (a settle that fails leaves the entry to
// MinIdle), and so does Close; PauseRenewals stops it for fault injection.
//
// Its Features, and why:
//
//   - Dedup false: Redis appends every XADD, so a republished message is a second
//     entry with the same id field; the inbox deduplicates on it.
//   - OrderedPerKey true: XADD gives entries of one stream increasing ids (in the
//     order Redis applied the XADDs, which for one Publish call is the order given),
//     and XREADGROUP > hands a consumer new entries in id order. A group with several
//     consumers splits the stream, each in order; a redelivered entry (nak'ed, or
//     reclaimed from a dead consumer) comes after entries read since.
//   - DelayedNak true: Nak(delay) keeps the entry pending and sets its idle time to
//     MinIdle-delay (XCLAIM IDLE), so Redis's clock makes it reclaimable after delay,
//     and a crash of this process does not lose the delay. A delay longer than MinIdle
//     is held by this source, which resets the idle time while Receive is being
//     called; if the source closes or stops calling Receive first, the entry comes
//     back MinIdle after the last reset, sooner than asked. Redeliveries happen when
//     Receive next looks for them, so delays are kept within about Block.
//   - Attempts true: Redis counts deliveries per pending entry. A first read is
//     attempt 1; XAUTOCLAIM increments the count and XPENDING reads it. Nak and its
//     idle resets do not count as deliveries.
//
// Entries deleted (XDEL, trimming) while pending cannot be delivered: XAUTOCLAIM
// drops them from the pending list and the source logs their ids to StreamSourceConfig.Logger.
// Entries that do not follow the layout of StreamFieldID are delivered with what
// they have (ID "" if the id field is missing), never dropped, so the inbox can
// dead-letter them.
type StreamSource struct {
	client   redis.UniversalClient
	cfg      StreamSourceConfig
	drop     *redis.Script // the consumer, when it holds no pending entries
	closed   atomic.Bool
	touched  atomic.Bool   // Receive reached Redis, so the consumer may exist there
	interval time.Duration // between looks for idle entries: min(Block, MinIdle)

	turn   chan struct{} // held by the running Receive; guards the fields below
	ready  bool          // the group exists
	cursor string        // where the next XAUTOCLAIM scan of the pending list starts

	// held keeps the entries handed out and not yet settled from being reclaimed:
	// every third of MinIdle it resets their idle time, until MaxExtension. It
	// runs from the first delivery until Close.
	held      brokerkit.Keeper[*streamSettler]
	keepOnce  sync.Once
	stopKeep  context.CancelFunc // nil until the keeper runs
	keepEnded chan struct{}      // closed when the keeper has returned

	mu       sync.Mutex
	claimAt  time.Time            // when to look for idle entries again
	nakDue   []time.Time          // when entries nak'ed for up to MinIdle become reclaimable
	deferred map[string]time.Time // entry id -> due time of a Nak longer than MinIdle
	resetAt  time.Time            // last idle reset of the deferred entries
}

var _ brokerkit.Source = (*StreamSource)(nil)

// dropConsumerLua deletes the consumer only when it has no pending entries, in one
// atomic step, so Close never strands an entry (XGROUP DELCONSUMER discards the
// deleted consumer's pending entries). A later XREADGROUP would simply recreate it.
const dropConsumerLua = `
if #redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2]) == 0 then
  return redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
end
return -1
`

// NewStreamSource returns a source reading cfg.Stream through client, which it does
// not own. It sends no command: the group is created by the first Receive.
func NewStreamSource(client redis.UniversalClient, cfg StreamSourceConfig) (*StreamSource, error) {
	cfg, err := brokerkit.Configure(checkClient(client), cfg, StreamSourceConfig.withDefaults)
	if err != nil {
		return nil, err
	}
	s := &StreamSource{
		client:    client,
		cfg:       cfg,
		drop:      redis.NewScript(dropConsumerLua),
		interval:  min(cfg.Block, cfg.MinIdle),
		turn:      make(chan struct{}, 1),
		cursor:    "0-0",
		deferred:  make(map[string]time.Time),
		keepEnded: make(chan struct{}),
	}
	s.held = brokerkit.Keeper[*streamSettler]{Every: cfg.MinIdle / 3, Margin: cfg.MinIdle, Lease: cfg.MinIdle,
		MaxExtension: cfg.MaxExtension, Extend: s.extend, LetGo: s.letGo}
	return s, nil
}

// keep starts keeping st from being reclaimed, and the keeper with the source's
// first delivery (NewStreamSource starts nothing). After Close it does nothing.
func (s *StreamSource) keep(st *streamSettler, now time.Time) {
	s.keepOnce.Do(func() {
		if s.closed.Load() {
			close(s.keepEnded)
			return
		}
		var ctx context.Context
		ctx, s.stopKeep = context.WithCancel(context.Background())
		go func() {
			defer close(s.keepEnded)
			s.held.Run(ctx)
		}()
	})
	if !s.closed.Load() {
		s.held.Add(st, now, now.Add(s.cfg.MinIdle))
	}
}

// stopKeeping stops the keeper, if it runs, and forgets what it kept.
func (s *StreamSource) stopKeeping() {
	s.keepOnce.Do(func() { close(s.keepEnded) }) // never started: nothing to stop
	if s.stopKeep != nil {
		s.stopKeep()
	}
	<-s.keepEnded
	s.held.Drain()
}

// extend resets the idle time of sts' entries in one XCLAIM, so no source of the
// group reclaims them; the keeper lets go of them all if it fails.
func (s *StreamSource) extend(ctx context.Context, sts []*streamSettler) map[*streamSettler]error {
	ids := make([]string, len(sts))
	for i, st := range sts {
		ids[i] = st.id
	}
	err := s.setIdle(ctx, s.client, 0, ids...).Err()
	if err == nil {
		return nil
	}
	failed := make(map[*streamSettler]error, len(sts))
	for _, st := range sts {
		failed[st] = err
	}
	return failed
}

// letGo warns of a delivery no longer kept from being reclaimed.
func (s *StreamSource) letGo(st *streamSettler, err error) {
	if err == nil {
		s.cfg.Logger.Warn("idemredis: a delivery is unsettled after StreamSourceConfig.MaxExtension; it is no longer kept and is reclaimed after MinIdle",
			"stream", s.cfg.Stream, "group", s.cfg.Group, "entry", st.id, "max_extension", s.cfg.MaxExtension)
		return
	}
	s.cfg.Logger.Warn("idemredis: resetting the idle time of an unsettled delivery failed; another source may reclaim it after MinIdle",
		"stream", s.cfg.Stream, "group", s.cfg.Group, "entry", st.id, "error", err)
}

// PauseRenewals stops the idle-time resets of the source's unsettled deliveries
// until resume is called, as a paused process stops them: past MinIdle, another
// source of the group reclaims them. It is for fault injection (idem verify's
// consumers paused past their ack wait, tests). resume may be called more than
// once.
func (s *StreamSource) PauseRenewals() (resume func()) { return s.held.Pause() }

// Features implements idem.FeatureReporter; the type's doc gives the reasons.
func (s *StreamSource) Features() idem.Features { return streamFeatures() }

// MessagingSystem is the messaging.system of the spans of the outbox relay and the
// inbox that use it: "redis".
func (s *StreamSource) MessagingSystem() string { return "redis" }

// Consumer is the source's consumer name in the group, as XINFO CONSUMERS shows it.
func (s *StreamSource) Consumer() string { return s.cfg.Consumer }

// Receive implements idem.Source. It returns reclaimed entries or new ones, at most
// max, as soon as there are any; without any, it returns ctx.Err() within about
// Block of ctx ending.
func (s *StreamSource) Receive(ctx context.Context, max int) ([]idem.Delivery, error) {
	if err := brokerkit.CheckMax(max); err != nil {
		return nil, err
	}
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-s.turn }()
	for {
		if s.closed.Load() {
			return nil, idem.ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ds, err := s.receiveOnce(ctx, max)
		if err != nil && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil || len(ds) > 0 {
			return ds, err
		}
	}
}

// receiveOnce runs one round of Receive: make sure the group exists, keep long naks
// waiting, reclaim when it is time, and otherwise wait up to Block for new entries.
func (s *StreamSource) receiveOnce(ctx context.Context, max int) ([]idem.Delivery, error) {
	if !s.ready {
		err := s.client.XGroupCreateMkStream(ctx, s.cfg.Stream, s.cfg.Group, "0").Err()
		if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
			return nil, backendError("receive", err)
		}
		s.ready = true
		s.touched.Store(true)
	}
	if err := s.refreshDeferred(ctx); err != nil {
		return nil, s.receiveError(err)
	}
	if s.reclaimDue(time.Now()) {
		ds, err := s.reclaim(ctx, max)
		if err != nil || len(ds) > 0 {
			return ds, s.receiveError(err)
		}
	}
	ds, err := s.read(ctx, max)
	return ds, s.receiveError(err)
}

// receiveError wraps err; NOGROUP (the stream or group was deleted under the source)
// is not an error but a cue to create the group again on the next round.
func (s *StreamSource) receiveError(err error) error {
	if err == nil {
		return nil
	}
	if strings.HasPrefix(err.Error(), "NOGROUP") {
		s.ready = false
		return nil
	}
	return backendError("receive", err)
}

// reclaimDue reports whether it is time to look for entries to reclaim: the periodic
// look, or a nak'ed entry's delay has passed.
func (s *StreamSource) reclaimDue(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !now.Before(s.claimAt) {
		return true
	}
	for _, t := range s.nakDue {
		if !now.Before(t) {
			return true
		}
	}
	return false
}

// wakeLocked is when Receive must next stop waiting for new entries: to reclaim, or
// to reset the idle time of entries nak'ed for longer than MinIdle. s.mu is held.
func (s *StreamSource) wakeLocked() time.Time {
	w := s.claimAt
	for _, t := range s.nakDue {
		if t.Before(w) {
			w = t
		}
	}
	if len(s.deferred) > 0 {
		if t := s.resetAt.Add(s.cfg.MinIdle / 3); t.Before(w) {
			w = t
		}
		for _, due := range s.deferred {
			if t := due.Add(-s.cfg.MinIdle); t.Before(w) {
				w = t
			}
		}
	}
	return w
}

// reclaim takes over entries pending for MinIdle or longer, continuing the scan of
// the pending list where the last call left it.
func (s *StreamSource) reclaim(ctx context.Context, max int) ([]idem.Delivery, error) {
	sent := time.Now() // Redis ran the command later: nak delays due by now are covered
	msgs, next, deleted, err := s.client.XAutoClaimWithDeleted(ctx, &redis.XAutoClaimArgs{
		Stream: s.cfg.Stream, Group: s.cfg.Group, Consumer: s.cfg.Consumer,
		MinIdle: time.Duration(ms(s.cfg.MinIdle)) * time.Millisecond, Start: s.cursor, Count: int64(max),
	}).Result()
	if err != nil {
		return nil, err
	}
	s.cursor = next
	now := time.Now()
	s.mu.Lock()
	if len(msgs) == 0 && next == "0-0" {
		s.claimAt = now.Add(s.interval) // a full pass found nothing; look again later
	} else {
		s.claimAt = now // more may be waiting further down the pending list
	}
	s.nakDue = slices.DeleteFunc(s.nakDue, func(t time.Time) bool { return !sent.Before(t) })
	s.mu.Unlock()
	if len(deleted) > 0 {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "idemredis: pending stream entries were deleted before they were acknowledged; they cannot be delivered",
			slog.String("stream", s.cfg.Stream), slog.String("group", s.cfg.Group), slog.Any("ids", deleted))
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	// XAUTOCLAIM does not return delivery counts; read them in one more round trip.
	pipe := s.client.Pipeline()
	counts := make([]*redis.XPendingExtCmd, len(msgs))
	for i, x := range msgs {
		counts[i] = pipe.XPendingExt(ctx, &redis.XPendingExtArgs{
			Stream: s.cfg.Stream, Group: s.cfg.Group, Start: x.ID, End: x.ID, Count: 1, Consumer: s.cfg.Consumer})
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	ds := make([]idem.Delivery, 0, len(msgs))
	for i, x := range msgs {
		attempt := 0 // the entry changed hands again already: Redis's count is unknown
		if p := counts[i].Val(); len(p) == 1 {
			attempt = int(p[0].RetryCount)
		}
		ds = append(ds, s.delivery(ctx, x, attempt))
	}
	return ds, nil
}

// read waits for new entries, at most Block and no longer than ctx's deadline or the
// next time entries may need reclaiming.
func (s *StreamSource) read(ctx context.Context, max int) ([]idem.Delivery, error) {
	block := s.cfg.Block
	now := time.Now()
	if d, ok := ctx.Deadline(); ok {
		block = min(block, d.Sub(now))
	}
	s.mu.Lock()
	block = min(block, s.wakeLocked().Sub(now))
	s.mu.Unlock()
	block = max1ms(block)
	res, err := s.client.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: s.cfg.Group, Consumer: s.cfg.Consumer, Streams: []string{s.cfg.Stream, ">"},
		Count: int64(max), Block: block,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil // Block passed without new entries
	}
	if err != nil {
		return nil, err
	}
	var ds []idem.Delivery
	for _, st := range res {
		for _, x := range st.Messages {
			ds = append(ds, s.delivery(ctx, x, 1)) // XREADGROUP > is always the first delivery
		}
	}
	return ds, nil
}

// max1ms rounds d up to a whole millisecond, 1ms at least: XREADGROUP takes whole
// milliseconds and reads BLOCK 0 as "forever".
func max1ms(d time.Duration) time.Duration {
	if d < time.Millisecond {
		return time.Millisecond
	}
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

func (s *StreamSource) delivery(ctx context.Context, x redis.XMessage, attempt int) idem.Delivery {
	m, problem := decodeEntry(s.cfg.Stream, x)
	if problem != "" {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "idemredis: malformed stream entry: "+problem,
			slog.String("stream", s.cfg.Stream), slog.String("entry", x.ID), slog.String("id", m.ID))
	}
	st := &streamSettler{src: s, id: x.ID}
	s.keep(st, time.Now())
	return idem.Delivery{Message: m, Attempt: attempt, Position: x.ID, Settler: st}
}
