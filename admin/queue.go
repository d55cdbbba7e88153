package admin

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin/view"
)

// Queue is the area of the database as the queue (package queue): its
// unfinished messages per topic and state, its messages a page at a time, and
// the cancelling of one. Cancel returns an error matching idem.ErrNotFound when
// the topic and id name no unfinished message.
type Queue interface {
	Status(ctx context.Context) (QueueStatus, error)
	// Messages returns up to limit messages of topic ("" for all): unfinished
	// ones by id after cursor, or, with finished, finished ones newest first
	// before cursor.
	Messages(ctx context.Context, topic string, finished bool, cursor string, limit int) (QueueMessagePage, error)
	// Cancel finishes the unfinished message of topic and id as cancelled,
	// with reason: it will not run, and one running cannot commit its effect.
	Cancel(ctx context.Context, topic, id, reason string) error
}

// QueueStatus is the queue at a glance: its topics with unfinished messages,
// by topic.
type QueueStatus struct {
	Topics []QueueTopic `json:"topics"`
}

// QueueTopic is one topic's unfinished messages by state, as the operator view
// declares it.
type QueueTopic = view.QueueTopic

// QueueMessage is one message of the queue, as the operator view declares it.
type QueueMessage = view.QueueMessage

// QueueMessagePage is a page of Queue.Messages.
type QueueMessagePage struct {
	Messages []QueueMessage `json:"messages"`
	Next     string         `json:"next"` // "" after the last page
}

// Queue states of GET /api/queue/messages.
const (
	queueUnfinished = "unfinished"
	queueFinished   = "finished"
)

func serveQueue(h *handler, r *http.Request, c *call) (any, error) {
	st, err := h.cfg.Queue.Status(r.Context())
	if err != nil {
		return nil, err
	}
	if st.Topics == nil {
		st.Topics = []QueueTopic{}
	}
	return st, nil
}

func serveQueueMessages(h *handler, r *http.Request, c *call) (any, error) {
	q, err := parseQuery(r)
	if err != nil {
		return nil, err
	}
	cursor, limit, err := q.page()
	if err != nil {
		return nil, err
	}
	topic, err := q.text("topic", maxQueueTopic)
	if err != nil {
		return nil, err
	}
	state, err := q.oneOf("state", queueUnfinished, queueFinished)
	if err != nil {
		return nil, err
	}
	page, err := h.cfg.Queue.Messages(r.Context(), topic, state == queueFinished, cursor, limit)
	if err != nil {
		return nil, err
	}
	if page.Messages == nil {
		page.Messages = []QueueMessage{}
	}
	return page, nil
}

// maxQueueTopic bounds a topic the queue area takes.
const maxQueueTopic = 1024

type queueCancelRequest struct {
	Topic  string `json:"topic"`
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// QueueCancelled is the answer to POST /api/queue/cancel.
type QueueCancelled struct {
	Topic string `json:"topic"`
	ID    string `json:"id"`
	OK    bool   `json:"ok"`
}

func serveQueueCancel(h *handler, r *http.Request, c *call) (any, error) {
	var req queueCancelRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	c.target = []any{slog.String("area", areaQueue), slog.String("topic", view.Clean(req.Topic, 255)), slog.String("id", view.Clean(req.ID, 255))}
	if err := reason(c, "reason", req.Reason); err != nil {
		return nil, err
	}
	if err := checkText("topic", req.Topic, maxQueueTopic, true); err != nil {
		return nil, err
	}
	if err := checkText("id", req.ID, maxQueueTopic, true); err != nil {
		return nil, err
	}
	err := h.cfg.Queue.Cancel(r.Context(), req.Topic, req.ID, req.Reason)
	if errors.Is(err, idem.ErrNotFound) {
		return nil, notFound("no unfinished message of topic %q with id %q (never enqueued, finished already, or swept): nothing cancelled",
			view.Clean(req.Topic, 255), view.Clean(req.ID, 255))
	} else if err != nil {
		return nil, err
	}
	return QueueCancelled{Topic: req.Topic, ID: req.ID, OK: true}, nil
}
