package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemamqp"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemkafka"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/internal/redact"
)

// sinkSpec is a --sink URL, checked without connecting: open connects.
type sinkSpec struct {
	kind    string // nats, kafka, redis, amqp, webhook
	raw     string
	desc    string // for logs, without passwords
	brokers []string
	redis   *redis.Options
	webhook *idemhttp.WebhookSink
}

// parseSink checks --sink and the flags of its kind. Its errors are usage errors:
// they name the flag and the fix.
func parseSink(raw string, o *relayOptions) (sinkSpec, error) {
	s := sinkSpec{raw: raw, desc: redactURL(raw)}
	scheme, _, _ := strings.Cut(raw, "://")
	if o.natsSubjects != "" && o.natsStream == "" {
		return s, errors.New("--nats-subjects needs --nats-stream: name the stream to create or update over those subjects")
	}
	if o.natsStream != "" && scheme != "nats" && scheme != "tls" {
		return s, errors.New("--nats-stream applies to nats:// sinks only: drop it, or use a nats:// --sink")
	}
	switch scheme {
	case "nats", "tls":
		s.kind = "nats"
	case "kafka":
		s.kind = "kafka"
		brokers := strings.TrimPrefix(raw, "kafka://")
		if strings.Contains(brokers, "@") {
			return s, fmt.Errorf("--sink %q: credentials in a kafka:// URL are not supported (no SASL yet): "+
				"use kafka://host:9092[,host:9092] on a listener that needs none", s.desc)
		}
		for _, b := range strings.Split(brokers, ",") {
			b = strings.TrimPrefix(b, "kafka://")
			if _, port, err := net.SplitHostPort(b); err != nil || port == "" {
				return s, fmt.Errorf("--sink %q: %q is not a broker host:port: use kafka://host:9092[,host:9092]", s.desc, redact.String(b))
			}
			s.brokers = append(s.brokers, b)
		}
	case "redis", "rediss":
		s.kind = "redis"
		opts, err := redis.ParseURL(raw)
		if err != nil {
			return s, fmt.Errorf("--sink %q: %s: use redis://host:6379[/db]", s.desc, redact.String(err.Error()))
		}
		s.redis = opts
	case "amqp", "amqps":
		s.kind = "amqp"
		if _, err := amqp.ParseURI(raw); err != nil {
			return s, fmt.Errorf("--sink %q: %s: use amqp://user:pass@host:5672/[vhost]", s.desc, redact.String(err.Error()))
		}
	case "http", "https":
		s.kind = "webhook"
		if o.webhookSecret == "" {
			return s, errors.New("--sink " + s.desc + " is a webhook and needs a signing secret: set $IDEM_WEBHOOK_SECRET " +
				"(or --webhook-secret) to a random string of 32+ bytes shared with the receiver; unsigned webhooks can be forged")
		}
		if n := len(o.webhookSecret); n < idemhttp.MinWebhookSecret {
			return s, &idem.InputError{Field: "--webhook-secret ($IDEM_WEBHOOK_SECRET)",
				Reason: fmt.Sprintf("has %d bytes; it needs at least %d", n, idemhttp.MinWebhookSecret),
				Fix:    "use at least 32 random bytes shared with the receiver, such as the output of `openssl rand -hex 32`: a short secret can be guessed from one signed request"}
		}
		wh, err := idemhttp.NewWebhookSink(idemhttp.WebhookConfig{URL: raw, Secret: []byte(o.webhookSecret), Timeout: o.webhookTimeout})
		if err != nil {
			return s, fmt.Errorf("--sink %q: %w", s.desc, err)
		}
		s.webhook = wh
	default:
		return s, fmt.Errorf("--sink %q: unknown sink; use nats://host:4222, kafka://host:9092, redis://host:6379, "+
			"amqp://user:pass@host:5672/ or https://host/path (webhook)", s.desc)
	}
	return s, nil
}

// open connects the sink; close releases what open acquired.
func (s sinkSpec) open(ctx context.Context, o *relayOptions) (sink idem.Sink, close func(), err error) {
	switch s.kind {
	case "nats":
		nc, err := nats.Connect(s.raw, nats.Name("idem relay"), nats.MaxReconnects(-1))
		if err != nil {
			return nil, nil, fmt.Errorf("--sink %s: connect: %w", s.desc, redact.Error(err))
		}
		js, err := jetstream.New(nc)
		if err == nil && o.natsStream != "" {
			var subjects []string
			for _, subj := range strings.Split(o.natsSubjects, ",") {
				if subj = strings.TrimSpace(subj); subj != "" {
					subjects = append(subjects, subj)
				}
			}
			_, err = idemnats.EnsureStream(ctx, js, idemnats.StreamConfig{Name: o.natsStream, Subjects: subjects})
		}
		if err == nil {
			sink, err = idemnats.NewSink(js, idemnats.SinkConfig{})
		}
		if err != nil {
			nc.Close()
			return nil, nil, fmt.Errorf("--sink %s: %w", s.desc, redact.Error(err))
		}
		return sink, nc.Close, nil
	case "kafka":
		k, err := idemkafka.NewSink(idemkafka.SinkConfig{Brokers: s.brokers})
		if err != nil {
			return nil, nil, fmt.Errorf("--sink %s: %w", s.desc, redact.Error(err))
		}
		return k, func() { _ = k.Close() }, nil
	case "redis":
		client := redis.NewClient(s.redis)
		r, err := idemredis.NewStreamSink(client, idemredis.StreamSinkConfig{})
		if err == nil {
			err = client.Ping(ctx).Err()
		}
		if err != nil {
			client.Close()
			return nil, nil, fmt.Errorf("--sink %s: %w", s.desc, redact.Error(err))
		}
		return r, func() { _ = client.Close() }, nil
	case "amqp":
		a := &amqpSink{url: s.raw, cfg: idemamqp.SinkConfig{Exchange: o.amqpExchange, Mandatory: o.amqpMandatory}}
		if err := a.connect(); err != nil {
			return nil, nil, fmt.Errorf("--sink %s: %w", s.desc, redact.Error(err))
		}
		return a, a.close, nil
	case "webhook":
		return s.webhook, func() {}, nil
	}
	return nil, nil, fmt.Errorf("--sink %s: unknown sink", s.desc)
}

// amqpSink redials RabbitMQ when its connection died: an idemamqp.Sink replaces a
// dead channel itself, but a dead connection needs a new connection and sink.
type amqpSink struct {
	url string
	cfg idemamqp.SinkConfig

	mu   sync.Mutex
	conn *amqp.Connection
	sink *idemamqp.Sink
}

func (a *amqpSink) connect() error {
	conn, err := amqp.Dial(a.url)
	if err != nil {
		return &idem.BackendError{Backend: idemamqp.Backend, Op: "dial", Err: err}
	}
	sink, err := idemamqp.NewSink(conn, a.cfg)
	if err != nil {
		_ = conn.Close()
		return err
	}
	a.conn, a.sink = conn, sink
	return nil
}

func (a *amqpSink) Publish(ctx context.Context, msgs ...idem.Message) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conn == nil || a.conn.IsClosed() {
		a.release()
		if err := a.connect(); err != nil {
			return err
		}
	}
	return a.sink.Publish(ctx, msgs...)
}

func (a *amqpSink) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.release()
}

func (a *amqpSink) release() {
	if a.sink != nil {
		_ = a.sink.Close()
	}
	if a.conn != nil {
		_ = a.conn.Close()
	}
	a.conn, a.sink = nil, nil
}

// redactURL hides the credentials of a URL (password, secret query values), for
// logs and errors.
func redactURL(raw string) string { return redact.URL(raw) }
