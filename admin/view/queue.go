package view

import (
	"time"

	"github.com/idemhq/idem/queue"
)

// QueueTopic is one topic of the database as the queue (package queue): its
// unfinished messages by state.
type QueueTopic struct {
	Topic string `json:"topic"`
	// Ready are due and waiting for a consumer.
	Ready int64 `json:"ready"`
	// Running are leased to a consumer.
	Running int64 `json:"running"`
	// Retrying are backing off after a failed attempt.
	Retrying int64 `json:"retrying"`
	// Scheduled are waiting for their run-at time.
	Scheduled int64 `json:"scheduled"`
	// OldestReadyAgeSeconds is the age of the oldest ready message, 0 when none
	// is ready: growing, no consumer takes the topic's messages.
	OldestReadyAgeSeconds float64 `json:"oldest_ready_age_seconds"`
}

// QueueTopicOf is the view of a topic's status.
func QueueTopicOf(t queue.TopicStatus) QueueTopic {
	return QueueTopic{Topic: t.Topic, Ready: t.Ready, Running: t.Running, Retrying: t.Retrying, Scheduled: t.Scheduled,
		OldestReadyAgeSeconds: t.OldestReadyAge.Seconds()}
}

// QueueMessage is one message of the queue (without its payload and headers).
type QueueMessage struct {
	// ID is the row's id, the queue's order.
	ID int64 `json:"id"`
	// MessageID is the message's ID: cancel takes it with the topic.
	MessageID   string `json:"message_id"`
	Topic       string `json:"topic"`
	OrderingKey string `json:"ordering_key,omitempty"`
	// State is ready, running, retrying or scheduled while unfinished, then the
	// outcome: applied, duplicate, dead, cancelled or acked.
	State    string `json:"state"`
	Attempts int    `json:"attempts"`
	// LeasedBy names the consumer that holds it (its Source's Worker).
	LeasedBy    string    `json:"leased_by,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	AvailableAt time.Time `json:"available_at"`
	// LastError is why the last attempt failed, or why it was cancelled or
	// could not be delivered.
	LastError  string    `json:"last_error,omitempty"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	Outcome    string    `json:"outcome,omitempty"`
}

// QueueMessageOf is the view of a queue message, its state as of now.
func QueueMessageOf(i queue.Info, now time.Time) QueueMessage {
	return QueueMessage{ID: i.ID, MessageID: i.MessageID, Topic: i.Topic, OrderingKey: i.OrderingKey, State: i.State(now),
		Attempts: i.Attempts, LeasedBy: i.LeasedBy, CreatedAt: i.CreatedAt, AvailableAt: i.AvailableAt,
		LastError: i.LastError, FinishedAt: i.FinishedAt, Outcome: i.Outcome}
}
