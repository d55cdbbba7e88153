package open

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/internal/redact"
)

// SinkSpec is a --sink URL, checked without connecting: Open connects.
type SinkSpec struct {
	Kind    string // nats, kafka, redis, amqp, pubsub, sqs, webhook
	Raw     string
	Desc    string // for logs, without passwords
	brokers []string
	project string // pubsub
	redis   *redis.Options
	webhook *idemhttp.WebhookSink
	sqs     *sqsSpec
}

// ParseSink checks --sink and the flags of its kind. Its errors are usage errors:
// they name the flag and the fix.
func ParseSink(raw string, o *SinkFlags) (SinkSpec, error) {
	s := SinkSpec{Raw: raw, Desc: redact.URL(raw)}
	if err := cli.CheckURL("--sink", raw); err != nil {
		return s, err
	}
	scheme, _, _ := strings.Cut(raw, "://")
	if o.NATSSubjects != "" && o.NATSStream == "" {
		return s, errors.New("--nats-subjects needs --nats-stream: name the stream to create or update over those subjects")
	}
	if o.RedisDedup < 0 || o.RedisDedup > idemredis.MaxDedup {
		return s, fmt.Errorf("--redis-dedup %v: want 0 (append every publish) to %v", o.RedisDedup, idemredis.MaxDedup)
	}
	if o.NATSStream != "" && scheme != "nats" && scheme != "tls" {
		return s, errors.New("--nats-stream applies to nats:// sinks only: drop it, or use a nats:// --sink")
	}
	switch scheme {
	case "nats", "tls":
		s.Kind = "nats"
	case "kafka":
		return parseKafkaSink(s)
	case "pubsub":
		return parsePubSubSink(s)
	case "redis", "rediss":
		s.Kind = "redis"
		opts, err := redis.ParseURL(raw)
		if err != nil {
			return s, fmt.Errorf("--sink %q: %s: use redis://host:6379[/db]", s.Desc, redact.String(err.Error()))
		}
		s.redis = opts
	case "amqp", "amqps":
		s.Kind = "amqp"
		if _, err := amqp.ParseURI(raw); err != nil {
			return s, fmt.Errorf("--sink %q: %s: use amqp://user:pass@host:5672/[vhost]", s.Desc, redact.String(err.Error()))
		}
	case "http", "https":
		return parseWebhookSink(s, o)
	case "sqs":
		return parseSQSSink(s)
	default:
		return s, fmt.Errorf("--sink %q: unknown sink; use nats://host:4222, kafka://host:9092, redis://host:6379, "+
			"amqp://user:pass@host:5672/, pubsub://PROJECT, sqs://?region=eu-west-1 or https://host/path (webhook)", s.Desc)
	}
	return s, nil
}

// parseKafkaSink checks --sink kafka://host:9092[,host:9092].
func parseKafkaSink(s SinkSpec) (SinkSpec, error) {
	s.Kind = "kafka"
	brokers := strings.TrimPrefix(s.Raw, "kafka://")
	if strings.Contains(brokers, "@") {
		return s, fmt.Errorf("--sink %q: credentials in a kafka:// URL are not supported (no SASL yet): "+
			"use kafka://host:9092[,host:9092] on a listener that needs none", s.Desc)
	}
	for _, b := range strings.Split(brokers, ",") {
		b = strings.TrimPrefix(b, "kafka://")
		if _, port, err := net.SplitHostPort(b); err != nil || port == "" {
			return s, fmt.Errorf("--sink %q: %q is not a broker host:port: use kafka://host:9092[,host:9092]", s.Desc, redact.String(b))
		}
		s.brokers = append(s.brokers, b)
	}
	return s, nil
}

// parseWebhookSink checks --sink https://… and its signing secret, and makes the
// webhook sink (it connects per request).
func parseWebhookSink(s SinkSpec, o *SinkFlags) (SinkSpec, error) {
	s.Kind = "webhook"
	if o.WebhookSecret == "" {
		return s, errors.New("--sink " + s.Desc + " is a webhook and needs a signing secret: set $IDEM_WEBHOOK_SECRET " +
			"(or --webhook-secret) to a whsec_ secret of Standard Webhooks or a random string of 32+ bytes shared with the receiver; unsigned webhooks can be forged")
	}
	wh, err := idemhttp.NewWebhookSink(idemhttp.WebhookConfig{URL: s.Raw, Secret: []byte(o.WebhookSecret), Timeout: o.WebhookTimeout})
	if ie, ok := errors.AsType[*idem.InputError](err); ok && ie.Field == "WebhookConfig.Secret" {
		// Named as the user sets it; the error never quotes the secret.
		return s, &idem.InputError{Field: "--webhook-secret ($IDEM_WEBHOOK_SECRET)", Reason: ie.Reason, Fix: ie.Fix}
	}
	if err != nil {
		return s, fmt.Errorf("--sink %q: %w", s.Desc, err)
	}
	s.webhook = wh
	return s, nil
}

// sinkCheckTimeout bounds the check of a sink at start.
const sinkCheckTimeout = 15 * time.Second

// sinkNames name each kind of sink in sinkDown's error.
var sinkNames = map[string]string{"nats": "NATS", "kafka": "Kafka", "redis": "Redis", "amqp": "RabbitMQ",
	"pubsub": "Pub/Sub", "sqs": "SQS", "webhook": "the webhook receiver"}

// sinkDown is the error of a sink that does not answer when the relay starts.
// Every kind is checked before the relay starts, in the way its client allows (a
// connection for NATS and RabbitMQ, a PING for Redis, a Ping of the brokers for
// Kafka, a probe request for Pub/Sub and SQS, a connection for a webhook's
// receiver) and reported alike: a relay that starts has reached its sink once.
func sinkDown(s SinkSpec, err error) error {
	return fmt.Errorf("--sink %s: %s does not answer: %w; check the address, that it runs and that this host can reach it "+
		"(the relay checks its sink before it starts)", s.Desc, sinkNames[s.Kind], redact.Error(err))
}

// probeWebhook connects to the webhook's receiver, as its requests would (through
// the proxy of $HTTPS_PROXY or $HTTP_PROXY when one applies), with a TLS handshake
// for https:// when it connects directly, and sends nothing: the receiver sees no
// request at start, and its name, address and certificate are checked.
func probeWebhook(ctx context.Context, s SinkSpec) error {
	u, err := url.Parse(s.Raw)
	if err != nil {
		return errors.New("the URL does not parse") // parseWebhookSink took it: not reached
	}
	ctx, cancel := context.WithTimeout(ctx, sinkCheckTimeout)
	defer cancel()
	target, direct := u, true
	if p, err := http.ProxyFromEnvironment(&http.Request{URL: u}); err == nil && p != nil {
		target, direct = p, false
	}
	port := target.Port()
	switch {
	case port != "":
	case target.Scheme == "https":
		port = "443"
	default:
		port = "80"
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(target.Hostname(), port))
	if err != nil {
		return err
	}
	defer conn.Close()
	if direct && u.Scheme == "https" {
		return tls.Client(conn, &tls.Config{ServerName: u.Hostname()}).HandshakeContext(ctx)
	}
	return nil
}

// SinkFlags are relay's flags of its sink's kind: what ParseSink checks and
// SinkSpec.Open uses besides the URL.
type SinkFlags struct {
	NATSStream, NATSSubjects string
	AMQPExchange             string
	AMQPMandatory            bool
	WebhookSecret            string
	WebhookTimeout           time.Duration
	// RedisDedup is the Redis sink's duplicate window (idemredis
	// StreamSinkConfig.Dedup); 0 appends every publish.
	RedisDedup time.Duration
}
