package admin

import (
	"context"
	"time"

	"github.com/idemhq/idem/admin/view"
	"github.com/idemhq/idem/queue"
)

// QueueFrom returns the Queue area of q: its Status, its Unfinished and
// Finished pages (by row id), and its Cancel. A tool in another process than
// the queue's opens it with queue.Config{SkipMigrate: true} (ForSQL does).
func QueueFrom[Tx any](q *queue.Queue[Tx]) Queue { return queueArea[Tx]{q} }

type queueArea[Tx any] struct{ q *queue.Queue[Tx] }

func (a queueArea[Tx]) Status(ctx context.Context) (QueueStatus, error) {
	st, err := a.q.Status(ctx)
	if err != nil {
		return QueueStatus{}, err
	}
	return QueueStatus{Topics: viewsOf(st, view.QueueTopicOf)}, nil
}

func (a queueArea[Tx]) Messages(ctx context.Context, topic string, finished bool, cursor string, limit int) (QueueMessagePage, error) {
	from, err := decodeIDCursor(cursor)
	if err != nil {
		return QueueMessagePage{}, err
	}
	if limit <= 0 {
		limit = DefaultLimit
	}
	list := a.q.Unfinished
	if finished {
		list = a.q.Finished
	}
	rows, err := list(ctx, topic, from, limit)
	if err != nil {
		return QueueMessagePage{}, err
	}
	now := time.Now()
	var page QueueMessagePage
	page.Messages, page.Next = idPage(rows, limit, func(i queue.Info) int64 { return i.ID },
		func(i queue.Info) QueueMessage { return view.QueueMessageOf(i, now) })
	return page, nil
}

func (a queueArea[Tx]) Cancel(ctx context.Context, topic, id, reason string) error {
	return a.q.Cancel(ctx, topic, id, reason)
}
