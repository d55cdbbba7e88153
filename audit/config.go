package audit

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
)

// Defaults and bounds of Config.
const (
	// DefaultWindow is how far back an audit looks when Config.Window is 0.
	DefaultWindow = time.Hour
	// DefaultGrace is Config.Grace when 0: a message published longer ago and
	// neither applied nor dead-lettered is missing.
	DefaultGrace = 5 * time.Minute
	// DefaultPageSize is Config.PageSize when 0.
	DefaultPageSize = 500
	// MaxPageSize bounds Config.PageSize: one page is one query on the outbox and
	// at most two lookups of that many keys per consumer.
	MaxPageSize = 1000
	// DefaultMaxRepairs is Config.MaxRepairs when 0: republishes per run.
	DefaultMaxRepairs = 1000
	// DefaultMaxRepairsPerMessage is Config.MaxRepairsPerMessage when 0.
	DefaultMaxRepairsPerMessage = 3
	// DefaultExamples is Config.Examples when 0: missing ids listed per row.
	DefaultExamples = 10
	// DefaultRetention is Consumer.Retention when 0: the inbox's default key
	// retention (inbox.Config.Retention).
	DefaultRetention = 7 * 24 * time.Hour
)

// Config configures an Auditor. Every field has a default.
type Config struct {
	// Window is how far back the audit looks: it reads the messages published
	// in the last Window. Default DefaultWindow (1 h). It may be at most half of
	// every audited consumer's key Retention: a key forgotten after its
	// retention would read as missing, and a repair would apply it again.
	Window time.Duration
	// Grace is how long after its publication a message may still be on its
	// way: one published longer ago than Grace that no consumer of its topic
	// applied or dead-lettered is missing. Default DefaultGrace (5 min); it must
	// be shorter than Window. Keep it above the consumers' normal lag and, for
	// repair, above the broker's duplicate window (JetStream's Duplicates, 2 min
	// by default), or the broker drops the republished copy as a duplicate of
	// the id it remembers (the next audit then finds it missing again).
	Grace time.Duration
	// PageSize is how many outbox rows one keyset page reads. Default
	// DefaultPageSize, at most MaxPageSize.
	PageSize int
	// Repair republishes the missing messages: a copy of the outbox row, under
	// the same msg_id, which the relay publishes as any other row, so a consumer
	// that did get the message drops the copy by its key. Never a message a
	// consumer of its topic dead-lettered, nor one of a blind consumer's
	// topics; each repair is recorded (idem_outbox_repairs, Auditor.Repairs).
	Repair bool
	// MaxRepairs bounds the republishes of one run. Default DefaultMaxRepairs.
	MaxRepairs int
	// MaxRepairsPerMessage bounds the republishes of one message over all runs:
	// past it the message stays missing and is reported as such. Default
	// DefaultMaxRepairsPerMessage.
	MaxRepairsPerMessage int
	// Examples is how many missing message ids a Row lists. Default
	// DefaultExamples.
	Examples int
	// Deliveries, if set, tells the audit how many deliveries each consumer
	// processed and how many it dropped as duplicates (ScrapeDeliveries reads
	// them from the consumers' /metrics, GatherDeliveries from a
	// prometheus.Gatherer): the duplicate rate of the report's sentence.
	// Without it the sentence says the rate was not measured.
	Deliveries Deliveries
	// Now is the audit's clock; default time.Now. It should be the outbox's
	// clock: published_at is compared with it.
	Now func() time.Time
	// Registerer, if set, receives the idem_audit_* metrics.
	Registerer prometheus.Registerer
	// Logger receives a line per repair and per failed run. Nil discards.
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	c.Window = cmp.Or(c.Window, DefaultWindow)
	c.Grace = cmp.Or(c.Grace, DefaultGrace)
	c.PageSize = cmp.Or(c.PageSize, DefaultPageSize)
	c.MaxRepairs = cmp.Or(c.MaxRepairs, DefaultMaxRepairs)
	c.MaxRepairsPerMessage = cmp.Or(c.MaxRepairsPerMessage, DefaultMaxRepairsPerMessage)
	c.Examples = cmp.Or(c.Examples, DefaultExamples)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.Window < 0:
		return c, &idem.InputError{Field: "audit.Config.Window", Reason: fmt.Sprintf("is %v", c.Window), Fix: "give a positive duration, e.g. 1h (0 for the default)"}
	case c.Grace < 0 || c.Grace >= c.Window:
		return c, &idem.InputError{Field: "audit.Config.Grace", Reason: fmt.Sprintf("is %v with a Window of %v", c.Grace, c.Window),
			Fix: "give a positive duration shorter than Window, e.g. 5m: the time a message may take from publication to its consumers"}
	case c.PageSize < 0 || c.PageSize > MaxPageSize:
		return c, &idem.InputError{Field: "audit.Config.PageSize", Reason: fmt.Sprintf("is %d", c.PageSize), Fix: fmt.Sprintf("give 1 to %d rows (0 for %d)", MaxPageSize, DefaultPageSize)}
	case c.MaxRepairs < 0 || c.MaxRepairsPerMessage < 0 || c.Examples < 0:
		return c, &idem.InputError{Field: "audit.Config.MaxRepairs", Reason: "MaxRepairs, MaxRepairsPerMessage or Examples is negative", Fix: "give positive bounds (0 for the defaults)"}
	}
	return c, nil
}

// Consumer is one inbox consumer as the audit sees it.
type Consumer struct {
	// Name is the consumer's name (inbox.Config.Consumer): the scope of its keys
	// and the consumer of its dead letters. Required.
	Name string
	// Topics are the outbox topics it consumes (the topic EnqueueTx was given).
	// At least one.
	Topics []string
	// Table is the records table of its store. Default "idem_records"
	// (migrate.DefaultRecordsTable).
	Table string
	// Retention is its key retention (inbox.Config.Retention). Default
	// DefaultRetention (the inbox's 7 days). Config.Window may be at most half
	// of it.
	Retention time.Duration
}
