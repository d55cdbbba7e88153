package audit

import (
	"time"
)

// Report is what one audit run found, per topic and consumer.
type Report struct {
	// At is when the run started, by Config.Now.
	At time.Time `json:"at"`
	// From and To bound the publication times the run read: [From, To).
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Grace is Config.Grace: a message published before To-Grace and not
	// applied or dead-lettered is missing.
	Grace time.Duration `json:"grace_ns"`
	// Rows holds one row per topic and consumer, in the order of the
	// consumers given to New and of each one's Topics.
	Rows []Row `json:"rows"`
	// Blind lists the consumers the audit cannot see, and why; their rows count
	// what was published and nothing else.
	Blind []Blind `json:"blind"`
	// Repaired lists the messages this run republished (Config.Repair).
	Repaired []Repair `json:"repaired"`
	// Scanned is how many outbox rows the run read, Pages in how many pages.
	Scanned int64 `json:"scanned"`
	Pages   int   `json:"pages"`
	// Truncated is set when the run stopped before the end of the window (its
	// context ended): the counts are of the rows read.
	Truncated bool `json:"truncated,omitempty"`
}

// Row is one topic as one consumer got it, over the report's window.
type Row struct {
	Topic    string `json:"topic"`
	Consumer string `json:"consumer"`
	// Published is the number of messages of Topic published in the window
	// (repair copies not counted: see Republished).
	Published int64 `json:"published"`
	// Applied: the consumer holds their key (its handler's transaction
	// committed).
	Applied int64 `json:"applied"`
	// DeadLettered: neither applied nor ever to be by itself: the consumer
	// dead-lettered them (open or closed letters).
	DeadLettered int64 `json:"dead_lettered"`
	// Missing: published before To-Grace, neither applied nor dead-lettered,
	// and not repaired within Grace.
	Missing int64 `json:"missing"`
	// InFlight: published within Grace of To (or repaired within Grace, see
	// Repairing, or being applied: a claim in progress), not applied yet.
	InFlight int64 `json:"in_flight"`
	// Repairing counts the in-flight messages that are so because a repair
	// republished them less than Grace ago.
	Repairing int64 `json:"repairing"`
	// Republished is the number of repair copies of Topic published in the
	// window.
	Republished int64 `json:"republished"`
	// Unauditable counts the messages whose msg_id cannot be a key (longer than
	// idem.MaxKeyLen): no consumer can hold one, so the audit says nothing of
	// them.
	Unauditable int64 `json:"unauditable,omitempty"`
	// Latency is the distribution of enqueue → applied (the outbox row's
	// created_at to the consumer's claim of its key, by their databases'
	// clocks) of the applied messages.
	Latency Latency `json:"latency"`
	// MissingIDs lists up to Config.Examples missing message ids, oldest first.
	MissingIDs []string `json:"missing_ids,omitempty"`
	// Deliveries is the consumer's delivery counts from Config.Deliveries (nil
	// without it, or when the source has none for the consumer). They are the
	// consumer processes' counters since they started, all topics together,
	// not the window's.
	Deliveries *Delivered `json:"deliveries,omitempty"`
}

// Latency summarises a distribution of durations. The quantiles are read from
// a histogram of logarithmic buckets (each 19% wider than the one before): a
// quantile is the upper bound of its bucket, Max is exact.
type Latency struct {
	Count int64         `json:"count"`
	P50   time.Duration `json:"p50_ns"`
	P90   time.Duration `json:"p90_ns"`
	P99   time.Duration `json:"p99_ns"`
	Max   time.Duration `json:"max_ns"`
}

// Blind is a consumer the audit cannot see, and why.
type Blind struct {
	Consumer string `json:"consumer"`
	Reason   string `json:"reason"`
}

// Repair is one republished message, as recorded in idem_outbox_repairs.
type Repair struct {
	// CopyID is the outbox row of the copy, OrigID the row it repairs.
	CopyID int64  `json:"copy_id"`
	OrigID int64  `json:"orig_id"`
	MsgID  string `json:"msg_id"`
	Topic  string `json:"topic"`
	// Consumers are those that had not got it.
	Consumers []string  `json:"consumers"`
	Reason    string    `json:"reason"`
	At        time.Time `json:"at"`
}

// Delivered is a consumer's delivery counts: those its inbox processed (applied)
// and those it dropped as duplicates of a key it held.
type Delivered struct {
	Processed  int64 `json:"processed"`
	Duplicates int64 `json:"duplicates"`
}

// Missing is the total of the rows' Missing.
func (r *Report) Missing() int64 {
	var n int64
	for _, row := range r.Rows {
		n += row.Missing
	}
	return n
}
