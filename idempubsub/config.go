package idempubsub

import (
	"cmp"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/idemhq/idem"
)

// Defaults applied by the configs' withDefaults methods, the one place they live.
const (
	// DefaultLease is the ack deadline the source keeps renewing on a delivery while
	// its handler runs: a crashed consumer's messages come back within it.
	DefaultLease = 60 * time.Second
	// DefaultMaxExtension bounds how long the source keeps renewing one delivery:
	// a handler stuck longer than this gives its message back to the subscription
	// (the inbox's claim lease then keeps a second worker off it).
	DefaultMaxExtension = 60 * time.Minute
	// DefaultPullWait bounds one Pull request: how long an idle source waits on the
	// server before it asks again, and how long a Pull may outlive Close.
	DefaultPullWait = 10 * time.Second
	// DefaultAckDeadline is the ack deadline EnsureSubscription gives a new
	// subscription (Pub/Sub's own default, and its minimum).
	DefaultAckDeadline = 10 * time.Second
	// DefaultMaxOutstanding caps the deliveries one source holds unsettled (and
	// renews); Receive hands out no more until some are settled.
	DefaultMaxOutstanding = 1000
)

// Limits of Pub/Sub the adapter checks before sending (see Google's quotas page):
// larger values are refused by the service with an error for the whole request.
const (
	maxAttributes   = 100  // attributes per message
	maxAttrKeyLen   = 256  // bytes of an attribute key
	maxAttrValueLen = 1024 // bytes of an attribute value
	maxOrderingKey  = 1024 // bytes of an ordering key
	maxBatchCount   = 1000 // messages per Publish request
	maxBatchBytes   = 9 << 20
	maxAckIDs       = 1000 // ack IDs per Acknowledge/ModifyAckDeadline request (well under the 512 KB request cap)
	maxModAckSecs   = 600
)

// SinkConfig configures a Sink. The zero value is ready to use.
type SinkConfig struct {
	// Timeout bounds one Publish request (with the client's own retries) when the
	// caller's ctx has no deadline. 0 means 60 s.
	Timeout time.Duration
}

func (cfg SinkConfig) withDefaults() (SinkConfig, error) {
	cfg.Timeout = cmp.Or(cfg.Timeout, 60*time.Second)
	if cfg.Timeout < 0 {
		return cfg, &idem.InputError{Field: "SinkConfig.Timeout", Reason: fmt.Sprintf("is negative (got %v)", cfg.Timeout),
			Fix: "use 0 for 60s, or the longest a Publish may take"}
	}
	return cfg, nil
}

// SourceConfig configures a Source: which subscription, and how the source keeps
// the deliveries it handed out.
type SourceConfig struct {
	// Subscription is the subscription to pull from: its ID in the client's project,
	// or its full name "projects/P/subscriptions/S". Required: sources on one
	// subscription compete for its messages (the consumer group).
	Subscription string
	// Lease is the ack deadline the source sets, and keeps renewing, on every
	// delivery it handed out and that is not settled yet: how long after a crash
	// (or Close) an unsettled message comes back. 10 s to 600 s (Pub/Sub's range
	// for ModifyAckDeadline); 0 means DefaultLease.
	Lease time.Duration
	// MaxExtension is how long the source renews one delivery at most. 0 means
	// DefaultMaxExtension; it must be at least Lease.
	MaxExtension time.Duration
	// MaxOutstanding caps the deliveries handed out and not yet settled. 0 means
	// DefaultMaxOutstanding.
	MaxOutstanding int
	// PullWait bounds one Pull request on the server. 0 means DefaultPullWait.
	PullWait time.Duration
	// Logger, if set, receives failures the source cannot return to a caller (a
	// renewal of the ack deadlines that failed, a Nack of pulled messages at Close).
	Logger *slog.Logger
}

func (cfg SourceConfig) withDefaults() (SourceConfig, error) {
	cfg.Lease = cmp.Or(cfg.Lease, DefaultLease)
	cfg.MaxExtension = cmp.Or(cfg.MaxExtension, max(DefaultMaxExtension, cfg.Lease))
	cfg.MaxOutstanding = cmp.Or(cfg.MaxOutstanding, DefaultMaxOutstanding)
	cfg.PullWait = cmp.Or(cfg.PullWait, DefaultPullWait)
	return cfg, cfg.validate()
}

func (cfg SourceConfig) validate() error {
	if err := validateName("SourceConfig.Subscription", cfg.Subscription, "subscriptions", "the subscription ID, such as \"billing\""); err != nil {
		return err
	}
	switch {
	case cfg.Lease < 10*time.Second || cfg.Lease > maxModAckSecs*time.Second:
		return &idem.InputError{Field: "SourceConfig.Lease", Reason: fmt.Sprintf("is outside 10s..600s (got %v)", cfg.Lease),
			Fix: "use 0 for 60s; Pub/Sub accepts ack deadlines of 10 to 600 seconds"}
	case cfg.Lease%time.Second != 0:
		return &idem.InputError{Field: "SourceConfig.Lease", Reason: fmt.Sprintf("is not whole seconds (got %v)", cfg.Lease),
			Fix: "Pub/Sub ack deadlines are whole seconds: round it"}
	case cfg.MaxExtension < cfg.Lease:
		return &idem.InputError{Field: "SourceConfig.MaxExtension", Reason: fmt.Sprintf("(%v) is shorter than Lease (%v)", cfg.MaxExtension, cfg.Lease),
			Fix: "use 0 for 60m, or at least Lease"}
	case cfg.MaxOutstanding < 1:
		return &idem.InputError{Field: "SourceConfig.MaxOutstanding", Reason: fmt.Sprintf("is below 1 (got %d)", cfg.MaxOutstanding),
			Fix: "use 0 for 1000, or a positive cap"}
	case cfg.PullWait < 100*time.Millisecond:
		return &idem.InputError{Field: "SourceConfig.PullWait", Reason: fmt.Sprintf("is below 100ms (got %v)", cfg.PullWait),
			Fix: "use 0 for 10s; a shorter wait only polls the server more often"}
	}
	return nil
}

// SubscriptionConfig describes the subscription EnsureSubscription creates: the
// subset of Pub/Sub's settings idem relies on.
type SubscriptionConfig struct {
	// Name is the subscription ID (or full name). Required.
	Name string
	// Topic is the topic ID (or full name) it subscribes to. Required.
	Topic string
	// AckDeadline is the subscription's ack deadline, the deadline of a delivery
	// until the source first renews it. 0 means DefaultAckDeadline (10 s).
	AckDeadline time.Duration
	// Ordering turns on message ordering: messages with the same OrderingKey are
	// delivered in publish order (see the package documentation).
	Ordering bool
	// ExactlyOnce turns on exactly-once delivery: an acknowledged message is not
	// delivered again, and Ack reports whether the acknowledgement took.
	ExactlyOnce bool
	// DeadLetterTopic, if set, is where Pub/Sub moves a message after
	// MaxDeliveryAttempts deliveries. Only subscriptions with a dead-letter policy
	// count deliveries (Delivery.Attempt); without one, Attempt is 0 and the inbox
	// counts attempts itself.
	DeadLetterTopic string
	// MaxDeliveryAttempts is the dead-letter policy's limit, 5 to 100. 0 means 100.
	MaxDeliveryAttempts int
}

func (cfg SubscriptionConfig) withDefaults() (SubscriptionConfig, error) {
	cfg.AckDeadline = cmp.Or(cfg.AckDeadline, DefaultAckDeadline)
	if cfg.DeadLetterTopic != "" && cfg.MaxDeliveryAttempts == 0 {
		cfg.MaxDeliveryAttempts = 100
	}
	if err := validateName("SubscriptionConfig.Name", cfg.Name, "subscriptions", "a subscription ID such as \"billing\""); err != nil {
		return cfg, err
	}
	if err := validateName("SubscriptionConfig.Topic", cfg.Topic, "topics", "a topic ID such as \"orders\""); err != nil {
		return cfg, err
	}
	if cfg.DeadLetterTopic != "" {
		if err := validateName("SubscriptionConfig.DeadLetterTopic", cfg.DeadLetterTopic, "topics", "a topic ID such as \"orders-dead\""); err != nil {
			return cfg, err
		}
	}
	switch {
	case cfg.AckDeadline < 10*time.Second || cfg.AckDeadline > maxModAckSecs*time.Second || cfg.AckDeadline%time.Second != 0:
		return cfg, &idem.InputError{Field: "SubscriptionConfig.AckDeadline", Reason: fmt.Sprintf("is not whole seconds within 10s..600s (got %v)", cfg.AckDeadline),
			Fix: "use 0 for 10s; the source renews deadlines itself while handlers run"}
	case cfg.DeadLetterTopic != "" && (cfg.MaxDeliveryAttempts < 5 || cfg.MaxDeliveryAttempts > 100):
		return cfg, &idem.InputError{Field: "SubscriptionConfig.MaxDeliveryAttempts", Reason: fmt.Sprintf("is outside 5..100 (got %d)", cfg.MaxDeliveryAttempts),
			Fix: "use 0 for 100; Pub/Sub accepts 5 to 100"}
	case cfg.DeadLetterTopic == "" && cfg.MaxDeliveryAttempts != 0:
		return cfg, &idem.InputError{Field: "SubscriptionConfig.MaxDeliveryAttempts", Reason: "is set without a DeadLetterTopic",
			Fix: "set DeadLetterTopic too, or leave MaxDeliveryAttempts 0"}
	}
	return cfg, nil
}

// validateName checks a topic or subscription ID, or a full name
// "projects/P/<kind>/ID": the ID is 3 to 255 characters, starts with a letter,
// holds letters, digits and - _ . ~ + %, and does not start with "goog".
func validateName(field, name, kind, example string) error {
	if name == "" {
		return &idem.InputError{Field: field, Reason: "is empty", Fix: "set it to " + example}
	}
	id := name
	if strings.Contains(name, "/") {
		parts := strings.Split(name, "/")
		if len(parts) != 4 || parts[0] != "projects" || parts[1] == "" || parts[2] != kind {
			return &idem.InputError{Field: field, Reason: fmt.Sprintf("is neither an ID nor a full name (got %q)", name),
				Fix: fmt.Sprintf("use an ID such as \"orders\" or projects/PROJECT/%s/ID", kind)}
		}
		id = parts[3]
	}
	switch {
	case len(id) < 3 || len(id) > 255:
		return &idem.InputError{Field: field, Reason: fmt.Sprintf("has an ID of %d characters (got %q)", len(id), name),
			Fix: "Pub/Sub IDs are 3 to 255 characters"}
	case !isLetter(id[0]):
		return &idem.InputError{Field: field, Reason: fmt.Sprintf("does not start with a letter (got %q)", name),
			Fix: "Pub/Sub IDs start with a letter"}
	case strings.HasPrefix(strings.ToLower(id), "goog"):
		return &idem.InputError{Field: field, Reason: fmt.Sprintf("starts with \"goog\" (got %q), which Pub/Sub reserves", name), Fix: "rename it"}
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !isLetter(c) && !(c >= '0' && c <= '9') && !strings.ContainsRune("-_.~+%", rune(c)) {
			return &idem.InputError{Field: field, Reason: fmt.Sprintf("contains %q at byte %d (got %q)", id[i:i+1], i, name),
				Fix: "use letters, digits and - _ . ~ + %"}
		}
	}
	return nil
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// fullName is name as "projects/P/<kind>/ID", with P the client's project when
// name is an ID.
func fullName(project, kind, name string) string {
	if strings.Contains(name, "/") {
		return name
	}
	return "projects/" + project + "/" + kind + "/" + name
}

// shortName is the ID of a full name in project, or the full name of another
// project's resource.
func shortName(project, kind, name string) string {
	if id, ok := strings.CutPrefix(name, "projects/"+project+"/"+kind+"/"); ok {
		return id
	}
	return name
}
