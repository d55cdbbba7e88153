package open

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsqs"
	"github.com/idemhq/idem/idemsqs/sqsfake"
	"github.com/idemhq/idem/internal/redact"
)

// sqsSpec is a --sink sqs://… URL:
//
//	sqs://?region=eu-west-1      Amazon SQS in that region
//	sqs://                       Amazon SQS in the region of the AWS config chain
//	sqs://host:port[?region=R]   an SQS-compatible endpoint over HTTP (ElasticMQ,
//	                             LocalStack), region us-east-1 unless given
//
// Each message's topic names its FIFO queue ("orders.fifo", resolved once) or is
// the queue's URL. Credentials come from the standard AWS chain (AWS_ACCESS_KEY_ID
// and AWS_SECRET_ACCESS_KEY, AWS_PROFILE and the shared files, web identity, the
// instance or task role), never from the URL, and are never printed.
type sqsSpec struct {
	endpoint string // "" for AWS itself
	region   string // "" to take the config chain's
}

// parseSQSSink checks --sink sqs://… without connecting.
func parseSQSSink(s SinkSpec) (SinkSpec, error) {
	s.Kind = "sqs"
	u, err := url.Parse(s.Raw)
	if err != nil {
		return s, fmt.Errorf("--sink %q: not a URL: use sqs://?region=eu-west-1 or sqs://host:port", s.Desc) // checkURL refused it already
	}
	if u.User != nil {
		return s, fmt.Errorf("--sink %q: credentials do not go in the URL: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "+
			"AWS_PROFILE, or run with an instance or task role", s.Desc)
	}
	if u.Path != "" && u.Path != "/" {
		return s, fmt.Errorf("--sink %q: the queue is not part of the sink URL: each message's topic names its queue "+
			"(\"orders.fifo\" or the queue URL); use sqs://?region=eu-west-1 or sqs://host:port", s.Desc)
	}
	spec := &sqsSpec{region: u.Query().Get("region")}
	for k := range u.Query() {
		if k != "region" {
			return s, fmt.Errorf("--sink %q: unknown parameter %q; sqs:// takes ?region= only", s.Desc, k)
		}
	}
	if u.Host != "" {
		if _, port, err := net.SplitHostPort(u.Host); err != nil || port == "" {
			return s, fmt.Errorf("--sink %q: %q is not host:port: use sqs://host:9324 for a local SQS-compatible endpoint", s.Desc, u.Host)
		}
		spec.endpoint = "http://" + u.Host
		if spec.region == "" {
			spec.region = "us-east-1"
		}
	}
	s.sqs = spec
	return s, nil
}

// openSQSSink is relay's --sink sqs://…: an idemsqs.Sink on a client from the
// standard AWS configuration.
func openSQSSink(ctx context.Context, s SinkSpec) (idem.Sink, func(), error) {
	var opts []func(*config.LoadOptions) error
	if s.sqs.region != "" {
		opts = append(opts, config.WithRegion(s.sqs.region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("--sink %s: load the AWS configuration: %w", s.Desc, redact.Error(err))
	}
	if cfg.Region == "" {
		return nil, nil, fmt.Errorf("--sink %s: no AWS region: set AWS_REGION, or use sqs://?region=eu-west-1", s.Desc)
	}
	client := sqs.NewFromConfig(cfg, func(o *sqs.Options) {
		if s.sqs.endpoint != "" {
			o.BaseEndpoint = aws.String(s.sqs.endpoint)
		}
	})
	sink, err := idemsqs.NewSink(client, idemsqs.SinkConfig{})
	if err != nil {
		return nil, nil, fmt.Errorf("--sink %s: %w", s.Desc, err)
	}
	if err := probeSQS(ctx, s, client); err != nil {
		return nil, nil, err
	}
	return sink, func() { _ = sink.Close() }, nil
}

// probeSQS asks SQS for the URL of a queue that need not exist: QueueDoesNotExist,
// or AccessDenied for a role that may only send to its queues, shows the endpoint
// answers and takes the credentials; anything else (unreachable, no or bad
// credentials, timed out) is sinkDown. The client connects lazily: without it a
// bad endpoint would only show at the first message.
func probeSQS(ctx context.Context, s SinkSpec, client *sqs.Client) error {
	pctx, cancel := context.WithTimeout(ctx, sinkCheckTimeout)
	defer cancel()
	_, err := client.GetQueueUrl(pctx, &sqs.GetQueueUrlInput{QueueName: aws.String("idem-relay-start-check")})
	var api smithy.APIError
	if err == nil || errors.As(err, &api) && (api.ErrorCode() == "AWS.SimpleQueueService.NonExistentQueue" ||
		api.ErrorCode() == "QueueDoesNotExist" || strings.HasPrefix(api.ErrorCode(), "AccessDenied")) {
		return nil
	}
	return sinkDown(s, err)
}

// openSQSBroker is verify's --broker sqs:: an in-process SQS (idemsqs/sqsfake) with
// the run's own FIFO queue, reached through a chaos.Proxy so the run can cut its
// connections. Each order is its own message group; sources use a visibility
// timeout of verifyAckWait.
func openSQSBroker(ctx context.Context, b *Broker, raw, run string) error {
	if raw != "sqs:" {
		//lint:ignore ST1005 the message ends with what to type, the scheme "sqs:"
		return fmt.Errorf("--broker %q: verify runs SQS in-process only: use sqs:", redact.URL(raw))
	}
	srv, err := sqsfake.Start(sqsfake.Config{})
	if err != nil {
		return fmt.Errorf("--broker sqs: %w", err)
	}
	b.cleanup = append(b.cleanup, func() { _ = srv.Close() })
	if err := b.proxyTo("sqs", strings.TrimPrefix(srv.URL(), "http://")); err != nil {
		return err
	}
	client := srv.Client(func(o *sqs.Options) { o.BaseEndpoint = aws.String("http://" + b.proxy.Addr()) })
	b.name = "sqs fifo (in-process sqsfake)"
	b.topic = "idem-verify-" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '-'
	}, run)
	b.topic = b.topic[:min(len(b.topic), 75)] + ".fifo"
	if _, err := idemsqs.EnsureQueue(ctx, client, b.topic, idemsqs.QueueConfig{}); err != nil {
		return fmt.Errorf("--broker sqs: %w", err)
	}
	b.openSink = func(ctx context.Context) (idem.Sink, error) {
		return idemsqs.NewSink(client, idemsqs.SinkConfig{GroupByID: true}) // orders need no order among them
	}
	b.openSource = func(ctx context.Context) (idem.Source, error) {
		// A paused consumer pauses the source's extensions and a lost ack is a
		// Nak of the ack wait (chaos: the source is a RenewalPauser);
		// MaxExtension bounds what else a consumer might leave unsettled.
		return idemsqs.NewSource(ctx, client, idemsqs.SourceConfig{Queue: b.topic, VisibilityTimeout: verifyAckWait, MaxExtension: 2 * verifyAckWait})
	}
	b.stored = func(ctx context.Context) (int, bool) { return srv.Accepted(b.topic) }
	return nil
}
