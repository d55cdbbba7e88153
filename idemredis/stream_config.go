package idemredis

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/idemhq/idem"
)

// Defaults of StreamSourceConfig.
const (
	// DefaultMinIdle is how long an entry stays pending with a consumer that no
	// longer renews it (dead, stalled, cut off, or past MaxExtension) before
	// another may take it over: short enough that a crashed consumer's messages are
	// not held up for long.
	DefaultMinIdle = 30 * time.Second
	// DefaultBlock is how long one XREADGROUP waits for new entries. It bounds how
	// late Receive notices that its ctx was cancelled (a blocked command cannot be
	// interrupted) and how often an idle source looks for entries to reclaim.
	DefaultBlock = time.Second
	// DefaultMaxExtension bounds how long a source keeps an unsettled delivery
	// from being reclaimed; see StreamSourceConfig.MaxExtension.
	DefaultMaxExtension = 30 * time.Minute
	// maxExtension bounds StreamSourceConfig.MaxExtension.
	maxExtension = 24 * time.Hour
)

// StreamSourceConfig configures a StreamSource. Stream and Group are required.
type StreamSourceConfig struct {
	// Stream is the stream key to read: the Message.Topic the producers publish to.
	Stream string
	// Group is the consumer group. Sources in one group compete: each entry goes to
	// one of them. Every group gets every entry. A missing group is created at the
	// start of the stream ("0"), so entries published before the first consumer
	// started are delivered; to start a new group at the end of a long stream
	// instead, create it yourself first (XGROUP CREATE stream group $ MKSTREAM).
	Group string
	// Consumer names this source within the group; Redis keeps each consumer's
	// pending entries under its name. Empty means hostname-pid-random, unique per
	// source. A stable name (a pod name) lets a restarted process find its own
	// pending entries before MinIdle, but two live sources must never share one.
	Consumer string
	// MinIdle is how long a delivered entry may stay unacknowledged before any
	// source of the group reclaims it (XAUTOCLAIM) and delivers it again: the
	// entries of a dead or stuck consumer, and this source's own after a Nak. A
	// delivery still unsettled is kept from it (MaxExtension), so it need not
	// cover the longest handler. Zero means DefaultMinIdle.
	MinIdle time.Duration
	// MaxExtension stops the renewals of a delivery unsettled for this long: while
	// a delivery is unsettled the source resets its idle time every third of
	// MinIdle (XCLAIM … IDLE 0 JUSTID), so no source of the group reclaims it from a
	// slow handler, or from an inbox batch run again after a database failure;
	// past MaxExtension it is reclaimed after MinIdle, so a stuck handler does not
	// hold its entry for ever. Zero means DefaultMaxExtension (30 minutes); at
	// most 24 hours.
	MaxExtension time.Duration
	// Block is how long one XREADGROUP waits for new entries; see DefaultBlock.
	// Whole milliseconds, 1ms at least. Zero means DefaultBlock.
	Block time.Duration
	// Logger, if set, is told about entries that are delivered damaged (headers that
	// are not a JSON object) and entries deleted while pending (which cannot be
	// delivered any more). Nil means no logging.
	Logger *slog.Logger
}

// withDefaults returns cfg with zero fields replaced by their defaults, validated.
// It is the one place defaults are applied.
func (cfg StreamSourceConfig) withDefaults() (StreamSourceConfig, error) {
	if cfg.Consumer == "" {
		cfg.Consumer = defaultConsumer()
	}
	cfg.MinIdle = cmp.Or(cfg.MinIdle, DefaultMinIdle)
	cfg.MaxExtension = cmp.Or(cfg.MaxExtension, DefaultMaxExtension)
	cfg.Block = cmp.Or(cfg.Block, DefaultBlock)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg, cfg.validate()
}

func (cfg StreamSourceConfig) validate() error {
	switch {
	case cfg.Stream == "":
		return &idem.InputError{Field: "StreamSourceConfig.Stream", Reason: "is empty",
			Fix: "set the stream key the producers publish to (their Message.Topic)"}
	case cfg.Group == "":
		return &idem.InputError{Field: "StreamSourceConfig.Group", Reason: "is empty",
			Fix: "name the consumer group, e.g. the consuming service's name"}
	case cfg.MinIdle < time.Millisecond:
		return &idem.InputError{Field: "StreamSourceConfig.MinIdle", Reason: fmt.Sprintf("is below 1ms (got %v)", cfg.MinIdle),
			Fix: "leave it zero for the default 30s, or set it above the longest handler run"}
	case cfg.MaxExtension < 0 || cfg.MaxExtension > maxExtension:
		return &idem.InputError{Field: "StreamSourceConfig.MaxExtension", Reason: fmt.Sprintf("is outside 0..24h (got %v)", cfg.MaxExtension),
			Fix: "leave it zero for 30 minutes, or the longest a handler may rightly hold an entry"}
	case cfg.Block < time.Millisecond:
		return &idem.InputError{Field: "StreamSourceConfig.Block", Reason: fmt.Sprintf("is below 1ms (got %v)", cfg.Block),
			Fix: "leave it zero for the default 1s (Redis reads BLOCK 0 as wait forever)"}
	}
	return nil
}

// defaultConsumer is hostname-pid-random: readable in XINFO CONSUMERS, and unique
// even for two sources in one process.
func defaultConsumer() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "idem"
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
}

// ms is d in whole milliseconds, rounded down, for Redis's millisecond arguments.
func ms(d time.Duration) int64 { return int64(d / time.Millisecond) }
