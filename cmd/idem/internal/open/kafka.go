package open

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkafka"
	"github.com/idemhq/idem/internal/redact"
)

// openKafkaSink is relay's --sink kafka://host:9092[,host:9092]: the idempotent
// producer, acks=all.
func openKafkaSink(ctx context.Context, s SinkSpec) (idem.Sink, func(), error) {
	k, err := idemkafka.NewSink(idemkafka.SinkConfig{Brokers: s.brokers})
	if err != nil {
		return nil, nil, fmt.Errorf("--sink %s: %w", s.Desc, redact.Error(err))
	}
	// The producer connects lazily: ask the brokers now.
	pctx, cancel := context.WithTimeout(ctx, sinkCheckTimeout)
	defer cancel()
	if err := k.Ping(pctx); err != nil {
		_ = k.Close()
		return nil, nil, sinkDown(s, err)
	}
	return k, func() { _ = k.Close() }, nil
}

// openKafkaBroker is verify's --broker kafka:[//host:9092,…]: an in-process
// cluster (kfake) when no address is given, the run's own topic and group. Kafka
// has no proxy: its client reconnects through its own metadata.
func openKafkaBroker(b *Broker, raw, run string) error {
	_, rest, _ := strings.Cut(raw, ":")
	addrs := strings.TrimPrefix(rest, "//")
	if strings.Contains(addrs, "@") {
		return fmt.Errorf("--broker %s: credentials in a kafka:// URL are not supported (no SASL yet): "+
			"use kafka://host:9092[,host:9092] on a listener that needs none", redact.URL(raw))
	}
	b.name = "kafka " + addrs
	b.topic = "idem-verify-" + run
	b.cumulative = true
	var brokers []string
	if addrs == "" {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, b.topic), kfake.GroupMinSessionTimeout(100*time.Millisecond))
		if err != nil {
			return fmt.Errorf("--broker kafka: start kfake: %w", err)
		}
		b.cleanup = append(b.cleanup, c.Close)
		brokers, b.name = c.ListenAddrs(), "kafka (in-process kfake)"
	} else {
		brokers = strings.Split(addrs, ",")
	}
	b.openSink = func(ctx context.Context) (idem.Sink, error) {
		return idemkafka.NewSink(idemkafka.SinkConfig{Brokers: brokers, Options: []kgo.Opt{kgo.AllowAutoTopicCreation()}})
	}
	b.openSource = func(ctx context.Context) (idem.Source, error) {
		return idemkafka.NewSource(idemkafka.SourceConfig{Brokers: brokers, Group: "ledger-" + run, Topics: []string{b.topic},
			CommitInterval: 100 * time.Millisecond,
			Options: []kgo.Opt{kgo.SessionTimeout(2 * time.Second), kgo.HeartbeatInterval(200 * time.Millisecond),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AllowAutoTopicCreation()}})
	}
	return nil
}
