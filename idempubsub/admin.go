package idempubsub

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/brokerkit"
)

// EnsureTopic creates the topic (an ID in the client's project, or a full name) if
// it does not exist yet. An existing topic is left as it is.
func EnsureTopic(ctx context.Context, client *pubsub.Client, topic string) error {
	if client == nil {
		return &idem.InputError{Field: "client", Reason: "is nil", Fix: "pass pubsub.NewClient(ctx, project)"}
	}
	if err := validateName("topic", topic, "topics", "a topic ID such as \"orders\""); err != nil {
		return err
	}
	name := fullName(client.Project(), "topics", topic)
	_, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: name})
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return &idem.BackendError{Backend: backend, Op: "create topic", Err: fmt.Errorf("%q: %w", name, err)}
	}
	return nil
}

// EnsureSubscription creates the subscription cfg describes if it does not exist
// yet. An existing subscription is left as it is (Pub/Sub cannot turn ordering on
// or off on an existing subscription), so its settings may differ from cfg.
func EnsureSubscription(ctx context.Context, client *pubsub.Client, cfg SubscriptionConfig) error {
	cfg, err := brokerkit.Setup(client == nil, "client", "pass pubsub.NewClient(ctx, project)", cfg, SubscriptionConfig.withDefaults)
	if err != nil {
		return err
	}
	p := client.Project()
	sub := &pubsubpb.Subscription{
		Name:                      fullName(p, "subscriptions", cfg.Name),
		Topic:                     fullName(p, "topics", cfg.Topic),
		AckDeadlineSeconds:        int32(cfg.AckDeadline / time.Second),
		EnableMessageOrdering:     cfg.Ordering,
		EnableExactlyOnceDelivery: cfg.ExactlyOnce,
		// Redelivery after a Nak is the adapter's (ModifyAckDeadline) and the inbox's
		// business; a RetryPolicy would add a server-side backoff on top.
		MessageRetentionDuration: durationpb.New(7 * 24 * time.Hour),
	}
	if cfg.DeadLetterTopic != "" {
		sub.DeadLetterPolicy = &pubsubpb.DeadLetterPolicy{DeadLetterTopic: fullName(p, "topics", cfg.DeadLetterTopic),
			MaxDeliveryAttempts: int32(cfg.MaxDeliveryAttempts)}
	}
	if _, err := client.SubscriptionAdminClient.CreateSubscription(ctx, sub); err != nil && status.Code(err) != codes.AlreadyExists {
		return &idem.BackendError{Backend: backend, Op: "create subscription", Err: fmt.Errorf("%q on topic %q: %w", sub.Name, sub.Topic, err)}
	}
	return nil
}
