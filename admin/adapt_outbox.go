package admin

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin/view"
	"github.com/idemhq/idem/outbox"
)

// OutboxFrom returns the Outbox area of a's database: the backlog per topic and
// partition, the relay instances (Stale when one stopped reporting), and the
// parked messages, discarded ones included (with DiscardedAt). Retry and Discard of
// an id that is not parked, or was discarded, answer 404.
func OutboxFrom[Tx any](a *outbox.Admin[Tx]) Outbox { return outboxArea[Tx]{a} }

type outboxArea[Tx any] struct{ a *outbox.Admin[Tx] }

func (o outboxArea[Tx]) Status(ctx context.Context) (OutboxStatus, error) {
	st, err := o.a.Status(ctx)
	if err != nil {
		return OutboxStatus{}, err
	}
	out := OutboxStatus{Parked: st.Parked, Discarded: st.Discarded,
		Partitions: make([]OutboxPartition, 0, len(st.Partitions)), Relays: make([]RelayStatus, 0, len(st.Relays))}
	for _, p := range st.Partitions {
		out.Partitions = append(out.Partitions, OutboxPartition{Topic: p.Topic, Partition: strconv.Itoa(p.Partition),
			Backlog: p.Unpublished, OldestAgeSeconds: p.OldestAge.Seconds(), Parked: p.Parked, Discarded: p.Discarded})
	}
	for _, r := range st.Relays {
		out.Relays = append(out.Relays, RelayStatus{Instance: r.Instance, LastRound: r.LastRoundAt, Published: r.PublishedTotal,
			Host: r.Host, PID: r.PID, StartedAt: r.StartedAt, PollIntervalSeconds: r.PollInterval.Seconds(),
			LastError: r.LastError, Stale: r.Stale})
	}
	return out, nil
}

func (o outboxArea[Tx]) Parked(ctx context.Context, cursor string, limit int) (ParkedPage, error) {
	after, err := decodeIDCursor(cursor)
	if err != nil {
		return ParkedPage{}, err
	}
	if limit <= 0 {
		limit = DefaultLimit
	}
	list, err := o.a.Parked(ctx, after, limit)
	if err != nil {
		return ParkedPage{}, err
	}
	var page ParkedPage
	page.Messages, page.Next = idPage(list, limit, func(p outbox.Parked) int64 { return p.ID }, view.ParkedOf)
	return page, nil
}

func (o outboxArea[Tx]) Retry(ctx context.Context, id int64) error {
	return notParked(id, o.a.Retry(ctx, id))
}

func (o outboxArea[Tx]) Discard(ctx context.Context, id int64, reason string) error {
	return notParked(id, o.a.Discard(ctx, id, reason))
}

func notParked(id int64, err error) error {
	if errors.Is(err, outbox.ErrNotParked) {
		return fmt.Errorf("message %d is not parked, or was discarded: %w", id, idem.ErrNotFound)
	}
	return err
}
