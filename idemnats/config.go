package idemnats

import (
	"cmp"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"

	"github.com/idemhq/idem"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults applied by the configs' withDefaults methods, the one place they live.
const (
	// DefaultAckWait is how long JetStream waits for an ack before it redelivers:
	// NATS's own default, long enough for a handler that commits a transaction.
	DefaultAckWait = 30 * time.Second
	// DefaultMaxExtension bounds how long a source keeps a delivery from being
	// redelivered while it is unsettled; see SourceConfig.MaxExtension.
	DefaultMaxExtension = 30 * time.Minute
	// maxExtension bounds SourceConfig.MaxExtension.
	maxExtension = 24 * time.Hour
	// DefaultMaxAckPending is how many delivered, unacknowledged messages one durable
	// may have outstanding (NATS's own default).
	DefaultMaxAckPending = 1000
	// DefaultFetchWait bounds one pull request on the server: short enough that an
	// idle source renews its request often, long enough not to poll.
	DefaultFetchWait = 5 * time.Second
	// DefaultDuplicates is the stream's dedup window (NATS's own default): an outbox
	// relay that crashed and republishes within it is deduplicated by the broker.
	DefaultDuplicates = 2 * time.Minute
	// DefaultMaxInFlight is how many publishes of one Publish call await their PubAck
	// at once; see SinkConfig.MaxInFlight.
	DefaultMaxInFlight = 256
	// DefaultRetryTimeout bounds a Publish's retries during a leader election: a
	// JetStream election takes a few seconds; this leaves room for two.
	DefaultRetryTimeout = 20 * time.Second
)

// SinkConfig configures a Sink. The zero value is ready to use.
type SinkConfig struct {
	// MaxInFlight is how many messages of one Publish call may await their PubAck at
	// once (pipelined on the connection). 1 publishes one message at a time, each
	// after the previous one's PubAck: slower, but a failed call never leaves a later
	// message stored before an earlier one. 0 means DefaultMaxInFlight.
	MaxInFlight int
	// RetryTimeout bounds how long one Publish retries what a JetStream leader
	// election shows the client: PubAck timeouts, no responders, "JetStream
	// system temporarily unavailable" (see the package documentation). Keep it
	// well inside the stream's Duplicates window, which makes a retry safe. 0
	// means DefaultRetryTimeout; -1 turns retries off.
	RetryTimeout time.Duration
	// Dedup is DedupWindow (the zero value: subject Message.Topic, dropped as a
	// duplicate within the stream's Duplicates window) or DedupForever (subject
	// IDSubject(Message.Topic, Message.ID) on a stream made with
	// StreamConfig.Dedup = DedupForever, which refuses a second publish of an ID
	// for as long as it keeps the first). With DedupForever the sink checks, on
	// the first publish to each topic, that the stream is set up so, and fails
	// with ErrNotForeverStream otherwise.
	Dedup DedupMode
}

func (cfg SinkConfig) withDefaults() (SinkConfig, error) {
	if cfg.Dedup > DedupForever {
		return cfg, &idem.InputError{Field: "SinkConfig.Dedup", Reason: fmt.Sprintf("is unknown (got %d)", cfg.Dedup),
			Fix: "use idemnats.DedupWindow or idemnats.DedupForever"}
	}
	cfg.MaxInFlight = cmp.Or(cfg.MaxInFlight, DefaultMaxInFlight)
	cfg.RetryTimeout = cmp.Or(cfg.RetryTimeout, DefaultRetryTimeout)
	if cfg.RetryTimeout < -1 || cfg.RetryTimeout > DefaultDuplicates {
		return cfg, &idem.InputError{Field: "SinkConfig.RetryTimeout", Reason: fmt.Sprintf("is outside -1..%v (got %v)", DefaultDuplicates, cfg.RetryTimeout),
			Fix: "use 0 for 20s, -1 for no retries, or less than the stream's Duplicates window"}
	}
	if cfg.MaxInFlight < 0 {
		return cfg, &idem.InputError{Field: "SinkConfig.MaxInFlight", Reason: fmt.Sprintf("is negative (got %d)", cfg.MaxInFlight),
			Fix: "use 0 for the default, 1 for one message at a time, or a larger window"}
	}
	return cfg, nil
}

// SourceConfig configures a Source: which stream, which durable consumer (the
// consumer group: sources with the same Durable share its messages), and how long
// JetStream waits for acks.
type SourceConfig struct {
	// Stream is the JetStream stream to consume. Required.
	Stream string
	// Durable names the durable pull consumer, created or updated by NewSource. Every
	// source with the same Stream and Durable competes for one set of messages.
	// Required: a default name would silently merge unrelated consumers.
	Durable string
	// FilterSubjects restricts the consumer to these subjects (wildcards allowed);
	// empty means every subject of the stream. More than one needs NATS 2.10.
	FilterSubjects []string
	// AckWait is how long a delivered message may stay unacknowledged before
	// JetStream delivers it again. While a delivery is unsettled the source sends
	// an in-progress ack (+WIP) every third of it, which starts it again, so a slow
	// handler (or an inbox batch run again after a database failure) keeps its
	// message; a consumer that dies or is cut off loses its messages to the others
	// within about AckWait. 0 means DefaultAckWait.
	AckWait time.Duration
	// MaxExtension stops the in-progress acks of a delivery unsettled for this
	// long, so a stuck handler does not hold its message for ever: it comes back
	// after AckWait. 0 means DefaultMaxExtension (30 minutes); at most 24 hours.
	MaxExtension time.Duration
	// MaxAckPending caps the messages delivered and not yet acknowledged. 0 means
	// DefaultMaxAckPending; -1 means unlimited; 1 keeps strict order even across
	// redeliveries (see the package documentation).
	MaxAckPending int
	// FetchWait is how long one pull request waits on the server for messages before
	// Receive renews it. It bounds how long a fetch outlives Close. 0 means
	// DefaultFetchWait.
	FetchWait time.Duration
	// Prefetch sends the next pull request as soon as a Receive has handed out
	// the last buffered message (for as many messages as that Receive asked for),
	// so the next batch travels while the caller processes this one, as nats.go's
	// Consume and Kafka's fetcher do. It lifts a steady batched consumer (about
	// 1.1-1.3x in bench/peers, batches of 64), but prefetched messages are
	// delivered and unacknowledged: they count toward MaxAckPending, their AckWait
	// runs while they wait, a competing consumer cannot take them, and a process
	// that dies holds them until AckWait. Under frequent consumer restarts or
	// handlers slower than AckWait it costs more than it saves (idem verify, whose
	// consumers are killed and paused on purpose, ran up to 1.6x slower with it),
	// hence off by default.
	Prefetch bool
	// Logger, if set, receives the failures the source cannot return to a caller
	// (a Nak of prefetched messages at Close).
	Logger *slog.Logger
}

func (cfg SourceConfig) withDefaults() (SourceConfig, error) {
	cfg.AckWait = cmp.Or(cfg.AckWait, DefaultAckWait)
	cfg.MaxAckPending = cmp.Or(cfg.MaxAckPending, DefaultMaxAckPending)
	cfg.FetchWait = cmp.Or(cfg.FetchWait, DefaultFetchWait)
	cfg.MaxExtension = cmp.Or(cfg.MaxExtension, DefaultMaxExtension)
	return cfg, cfg.validate()
}

func (cfg SourceConfig) validate() error {
	if err := validateName("SourceConfig.Stream", cfg.Stream, "the stream created with EnsureStream"); err != nil {
		return err
	}
	if err := validateName("SourceConfig.Durable", cfg.Durable, "the consumer group, such as \"billing\""); err != nil {
		return err
	}
	if err := validateSubjects("SourceConfig.FilterSubjects", cfg.FilterSubjects); err != nil {
		return err
	}
	switch {
	case cfg.AckWait < time.Millisecond:
		return &idem.InputError{Field: "SourceConfig.AckWait", Reason: fmt.Sprintf("is below 1ms (got %v)", cfg.AckWait),
			Fix: "use 0 for 30s, or about the longest time a handler takes plus a margin"}
	case cfg.MaxExtension < 0 || cfg.MaxExtension > maxExtension:
		return &idem.InputError{Field: "SourceConfig.MaxExtension", Reason: fmt.Sprintf("is outside 0..24h (got %v)", cfg.MaxExtension),
			Fix: "use 0 for 30 minutes, or the longest a handler may rightly hold a message"}
	case cfg.MaxAckPending < -1:
		return &idem.InputError{Field: "SourceConfig.MaxAckPending", Reason: fmt.Sprintf("is below -1 (got %d)", cfg.MaxAckPending),
			Fix: "use 0 for 1000, -1 for unlimited, or a positive cap"}
	case cfg.FetchWait < 10*time.Millisecond:
		return &idem.InputError{Field: "SourceConfig.FetchWait", Reason: fmt.Sprintf("is below 10ms (got %v)", cfg.FetchWait),
			Fix: "use 0 for 5s; a shorter wait only polls the server more often"}
	}
	return nil
}

// StreamConfig describes the stream EnsureStream creates or updates: the subset of
// jetstream.StreamConfig idem relies on, with idem's defaults.
type StreamConfig struct {
	// Name of the stream. Required.
	Name string
	// Subjects the stream captures (wildcards allowed). Empty means the stream's
	// name as its only subject, as in NATS.
	Subjects []string
	// Duplicates is the dedup window: a message whose Nats-Msg-Id the stream stored
	// within it is acknowledged as a duplicate and not stored again. It must cover
	// the longest time an outbox relay may take to republish after a crash. 0 means
	// DefaultDuplicates.
	Duplicates time.Duration
	// Storage is where the stream keeps messages: jetstream.FileStorage (the zero
	// value, survives restarts) or jetstream.MemoryStorage.
	Storage jetstream.StorageType
	// Replicas is the number of copies in a cluster; 0 means 1.
	Replicas int
	// MaxAge drops messages older than this, consumed or not: a consumer that lags
	// by more than MaxAge loses messages. 0 keeps them (no limit). When set, it must
	// be at least Duplicates. With DedupForever it is also how long an ID stays
	// taken: when its message ages out, the ID may be published again.
	MaxAge time.Duration
	// Dedup is DedupWindow (the zero value: discard old, no per-subject limit) or
	// DedupForever: discard new, discard_new_per_subject and
	// max_msgs_per_subject 1, so the stream refuses a second message on a
	// subject; with a DedupForever sink, whose subjects carry the message ID, a
	// second publish of an ID. See the package documentation for its limits.
	Dedup DedupMode
	// MaxMsgs and MaxBytes cap the stream (0: no cap). On a DedupWindow stream the
	// oldest messages are dropped to make room; on a DedupForever stream new
	// messages are refused (Publish fails, the outbox retries) until MaxAge frees
	// room, since dropping old messages would free their IDs.
	MaxMsgs  int64
	MaxBytes int64
}

func (cfg StreamConfig) withDefaults() (StreamConfig, error) {
	if len(cfg.Subjects) == 0 {
		cfg.Subjects = []string{cfg.Name}
	}
	cfg.Duplicates = cmp.Or(cfg.Duplicates, DefaultDuplicates)
	cfg.Replicas = cmp.Or(cfg.Replicas, 1)
	return cfg, cfg.validate()
}

func (cfg StreamConfig) validate() error {
	if err := validateName("StreamConfig.Name", cfg.Name, "a name such as \"ORDERS\""); err != nil {
		return err
	}
	if err := validateSubjects("StreamConfig.Subjects", cfg.Subjects); err != nil {
		return err
	}
	switch {
	case cfg.Duplicates < 0:
		return &idem.InputError{Field: "StreamConfig.Duplicates", Reason: fmt.Sprintf("is negative (got %v)", cfg.Duplicates),
			Fix: "use 0 for 2m, or the longest time a publisher may take to retry"}
	case cfg.Storage != jetstream.FileStorage && cfg.Storage != jetstream.MemoryStorage:
		return &idem.InputError{Field: "StreamConfig.Storage", Reason: fmt.Sprintf("is unknown (got %d)", cfg.Storage),
			Fix: "use jetstream.FileStorage or jetstream.MemoryStorage"}
	case cfg.Replicas < 1 || cfg.Replicas > 5:
		return &idem.InputError{Field: "StreamConfig.Replicas", Reason: fmt.Sprintf("is outside 1..5 (got %d)", cfg.Replicas),
			Fix: "use 0 for 1, or 3 in a cluster"}
	case cfg.MaxAge < 0:
		return &idem.InputError{Field: "StreamConfig.MaxAge", Reason: fmt.Sprintf("is negative (got %v)", cfg.MaxAge),
			Fix: "use 0 to keep messages until other limits"}
	case cfg.Dedup > DedupForever:
		return &idem.InputError{Field: "StreamConfig.Dedup", Reason: fmt.Sprintf("is unknown (got %d)", cfg.Dedup),
			Fix: "use idemnats.DedupWindow or idemnats.DedupForever"}
	case cfg.MaxMsgs < 0 || cfg.MaxBytes < 0:
		return &idem.InputError{Field: "StreamConfig.MaxMsgs/MaxBytes", Reason: fmt.Sprintf("is negative (got %d, %d)", cfg.MaxMsgs, cfg.MaxBytes),
			Fix: "use 0 for no cap"}
	case cfg.MaxAge > 0 && cfg.MaxAge < cfg.Duplicates:
		return &idem.InputError{Field: "StreamConfig.MaxAge", Reason: fmt.Sprintf("(%v) is shorter than Duplicates (%v)", cfg.MaxAge, cfg.Duplicates),
			Fix: "keep messages at least as long as the dedup window, or shorten Duplicates"}
	}
	return nil
}

// validateName checks a stream or consumer name: NATS puts it in API subjects, so
// it cannot hold subject separators, wildcards or spaces.
func validateName(field, name, example string) error {
	if name == "" {
		return &idem.InputError{Field: field, Reason: "is empty", Fix: "set it to " + example}
	}
	if i := strings.IndexFunc(name, func(r rune) bool {
		return r == '.' || r == '*' || r == '>' || r == '/' || r == '\\' || unicode.IsSpace(r) || unicode.IsControl(r)
	}); i >= 0 {
		return &idem.InputError{Field: field, Reason: fmt.Sprintf("contains %q at byte %d (got %q)", name[i:i+1], i, name),
			Fix: "use letters, digits, '-' and '_': the name becomes part of NATS API subjects"}
	}
	if len(name) > 255 {
		return &idem.InputError{Field: field, Reason: fmt.Sprintf("is longer than 255 bytes (got %d)", len(name)), Fix: "shorten it"}
	}
	return nil
}

// validateSubjects checks each subject of field (validateSubject), naming the
// first bad one by its index.
func validateSubjects(field string, subjects []string) error {
	for i, s := range subjects {
		if err := validateSubject(fmt.Sprintf("%s[%d]", field, i), s); err != nil {
			return err
		}
	}
	return nil
}

// validateSubject checks a subject or subject filter: non-empty tokens separated by
// dots, no spaces.
func validateSubject(field, subject string) error {
	if subject == "" {
		return &idem.InputError{Field: field, Reason: "is empty", Fix: "set a subject such as \"orders.>\""}
	}
	if strings.IndexFunc(subject, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return &idem.InputError{Field: field, Reason: fmt.Sprintf("contains a space or control character (got %q)", subject),
			Fix: "NATS subjects are dot-separated tokens without spaces, such as \"orders.created\""}
	}
	for _, tok := range strings.Split(subject, ".") {
		if tok == "" {
			return &idem.InputError{Field: field, Reason: fmt.Sprintf("has an empty token (got %q)", subject),
				Fix: "remove leading, trailing and doubled dots"}
		}
	}
	return nil
}
