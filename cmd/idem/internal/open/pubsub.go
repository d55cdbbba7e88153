package open

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempubsub"
	"github.com/idemhq/idem/internal/redact"
)

// verifyPubSubLease is the ack deadline of verify's Pub/Sub runs: Pub/Sub's
// minimum. The source renews a delivery for at most as long again, so a delivery
// whose ack the run loses on purpose comes back within twice this.
const verifyPubSubLease = 10 * time.Second

// parsePubSubSink checks --sink pubsub://PROJECT. Topics come from each outbox
// row, as subjects do for NATS; credentials are Google's Application Default
// Credentials, and PUBSUB_EMULATOR_HOST points the client at an emulator.
func parsePubSubSink(s SinkSpec) (SinkSpec, error) {
	s.Kind = "pubsub"
	u, err := url.Parse(s.Raw)
	const use = "use pubsub://PROJECT (the topic is each outbox row's; credentials come from GOOGLE_APPLICATION_CREDENTIALS, an emulator from PUBSUB_EMULATOR_HOST)"
	switch {
	case err != nil:
		return s, fmt.Errorf("--sink %q: not a URL: %s", s.Desc, use) // checkURL refused it already
	case u.User != nil:
		return s, fmt.Errorf("--sink %q: credentials in a pubsub:// URL are not supported: %s", s.Desc, use)
	case u.Host == "" || u.Port() != "":
		return s, fmt.Errorf("--sink %q: no project ID: %s", s.Desc, use)
	case strings.Trim(u.Path, "/") != "" || u.RawQuery != "":
		return s, fmt.Errorf("--sink %q: a path or query is not supported: %s", s.Desc, use)
	}
	s.project = u.Host
	return s, nil
}

// openPubSubSink is relay's --sink pubsub://PROJECT: Publish requests carrying the
// outbox key as the Idem-Msg-Id attribute and the row's ordering key.
func openPubSubSink(ctx context.Context, s SinkSpec) (idem.Sink, func(), error) {
	client, err := pubsub.NewClient(ctx, s.project)
	if err != nil {
		return nil, nil, fmt.Errorf("--sink %s: %w", s.Desc, redact.Error(err))
	}
	sink, err := idempubsub.NewSink(client, idempubsub.SinkConfig{})
	if err == nil {
		err = probePubSub(ctx, s, client)
	}
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	return sink, func() { _ = client.Close() }, nil
}

// probePubSub asks Pub/Sub for a topic that need not exist: NotFound, or
// PermissionDenied for a role that may only publish, shows the service answers and
// takes the credentials; anything else (unreachable, unauthenticated, timed out)
// is sinkDown. The client connects lazily: without it a bad endpoint would only
// show at the first message.
func probePubSub(ctx context.Context, s SinkSpec, client *pubsub.Client) error {
	pctx, cancel := context.WithTimeout(ctx, sinkCheckTimeout)
	defer cancel()
	// No retries: an endpoint that does not answer fails the start at once, as a
	// closed NATS port does, instead of retrying Unavailable until the timeout.
	noRetry := gax.WithRetry(func() gax.Retryer { return nil })
	_, err := client.TopicAdminClient.GetTopic(pctx, &pubsubpb.GetTopicRequest{Topic: "projects/" + s.project + "/topics/idem-relay-start-check"}, noRetry)
	switch status.Code(err) {
	case codes.OK, codes.NotFound, codes.PermissionDenied:
		return nil
	}
	return sinkDown(s, err)
}

// openPubSubBroker is verify's --broker pubsub:[//PROJECT]: an in-process fake
// (pstest) when no project is given, else that project on Pub/Sub or on the
// emulator PUBSUB_EMULATOR_HOST names. The run gets its own topic and an
// exactly-once subscription, deleted after. Pub/Sub has no proxy here: the client
// retries through its own connection. The sources log to logger (verify -v): a
// failed renewal of ack deadlines, or a delivery let go at MaxExtension, is a
// redelivery the report would otherwise not explain.
func openPubSubBroker(ctx context.Context, b *Broker, raw, run string, logger *slog.Logger) error {
	_, rest, _ := strings.Cut(raw, ":")
	project := strings.Trim(strings.TrimPrefix(rest, "//"), "/")
	b.topic = "idem-verify-" + run
	sub := "ledger-" + run
	b.ackWait = 2 * verifyPubSubLease
	var client *pubsub.Client
	var err error
	if project == "" {
		srv := pstest.NewServer()
		b.cleanup = append(b.cleanup, func() { _ = srv.Close() })
		conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return fmt.Errorf("--broker pubsub: connect to pstest: %w", err)
		}
		b.cleanup = append(b.cleanup, func() { _ = conn.Close() })
		if client, err = pubsub.NewClient(ctx, "idem-verify", option.WithGRPCConn(conn)); err != nil {
			return fmt.Errorf("--broker pubsub: %w", err)
		}
		// No Stored: Pub/Sub keeps every copy it is sent, and counting the fake's
		// messages would credit the broker with the relay's failed attempts.
		b.name = "pubsub (in-process pstest)"
	} else {
		if client, err = pubsub.NewClient(ctx, project); err != nil {
			return fmt.Errorf("--broker %s: %w", redact.URL(raw), redact.Error(err))
		}
		b.name = "pubsub " + project
	}
	b.cleanup = append(b.cleanup, func() { _ = client.Close() })
	if err := idempubsub.EnsureTopic(ctx, client, b.topic); err != nil {
		return fmt.Errorf("--broker %s: %w", redact.URL(raw), err)
	}
	if err := idempubsub.EnsureSubscription(ctx, client, idempubsub.SubscriptionConfig{Name: sub, Topic: b.topic,
		AckDeadline: verifyPubSubLease, ExactlyOnce: true}); err != nil {
		return fmt.Errorf("--broker %s: %w", redact.URL(raw), err)
	}
	if project != "" {
		b.cleanup = append(b.cleanup, func() { deletePubSub(client, b.topic, sub) })
	}
	b.openSink = func(context.Context) (idem.Sink, error) { return idempubsub.NewSink(client, idempubsub.SinkConfig{}) }
	b.openSource = func(ctx context.Context) (idem.Source, error) {
		return idempubsub.NewSource(ctx, client, idempubsub.SourceConfig{Subscription: sub,
			Lease: verifyPubSubLease, MaxExtension: verifyPubSubLease, PullWait: time.Second, Logger: logger})
	}
	return nil
}

// deletePubSub removes a verify run's subscription and topic from a real project.
func deletePubSub(client *pubsub.Client, topic, sub string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := client.Project()
	_ = client.SubscriptionAdminClient.DeleteSubscription(ctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: "projects/" + p + "/subscriptions/" + sub})
	_ = client.TopicAdminClient.DeleteTopic(ctx, &pubsubpb.DeleteTopicRequest{Topic: "projects/" + p + "/topics/" + topic})
}
